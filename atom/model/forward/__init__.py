"""The forward and its kernels: ATOM's Llama-family forward, paged attention, the
int8/int4 layers and the C++ CPU kernels (`csrc/`)."""

// The Python module of ATOM's CPU kernels. The long-running kernels release the GIL so
// the event loop thread keeps serving meanwhile; the small ones (a few microseconds)
// keep it, so the device thread does not queue for it again after every call.
#include <torch/extension.h>

#include "ops.h"

PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) {
  using release = pybind11::call_guard<pybind11::gil_scoped_release>;
  m.def("paged_decode", &paged_decode, "paged decode attention (CPU, float32)",
        pybind11::arg("query"), pybind11::arg("k_cache"), pybind11::arg("v_cache"),
        pybind11::arg("block_tables"), pybind11::arg("seq_lens"), pybind11::arg("block_size"),
        pybind11::arg("scale"), pybind11::arg("window"), pybind11::arg("softcap"),
        pybind11::arg("k_scales") = pybind11::none(), pybind11::arg("v_scales") = pybind11::none(),
        release());
  m.def("int8_linear", &int8_linear, "int8-weight linear for up to 4 rows (CPU)", release());
  m.def("int4_linear", &int4_linear, "4-bit block weights linear, any rows (CPU)",
        release());
  m.def("q5_linear", &q5_linear, "Q5_1 block weights linear, any rows (CPU)", release());
  m.def("q6_linear", &q6_linear, "Q6_K block weights linear, any rows (CPU)", release());
  m.def("q8_linear", &q8_linear, "Q8_0 block weights linear, any rows (CPU)", release());
  m.def("kernel_isa", &kernel_isa, "the instruction set the block products run on");
  m.def("set_kernel_isa", &set_kernel_isa, "use avx2, avx512_vnni or amx_int8; returns the one before");
  m.def("add_rms_norm", &add_rms_norm, "x += delta in place, then RMSNorm (CPU, float32)");
  m.def("rope_write", &rope_write, "rotary on q/k in place + K/V cache write (CPU, float32)",
        pybind11::arg("qkv"), pybind11::arg("cos"), pybind11::arg("sin"), pybind11::arg("k_cache"),
        pybind11::arg("v_cache"), pybind11::arg("slots"), pybind11::arg("heads"),
        pybind11::arg("kv_heads"), pybind11::arg("k_scales") = pybind11::none(),
        pybind11::arg("v_scales") = pybind11::none());
  m.def("silu_mul", &silu_mul, "silu(gate) * up (CPU, float32)");
  m.def("lora_add", &lora_add, "out += each row's LoRA slot delta (CPU, float32)", release());
  // module_local: builds with other flags (another fingerprint) may load beside this one.
  pybind11::class_<Projection>(m, "Projection", pybind11::module_local())
      .def(pybind11::init<int64_t, torch::Tensor, c10::optional<torch::Tensor>,
                          c10::optional<torch::Tensor>>(),
           pybind11::arg("kind"), pybind11::arg("weight"), pybind11::arg("scale"),
           pybind11::arg("bias"));
  pybind11::class_<LoraSlotStack>(m, "LoraSlotStack", pybind11::module_local())
      .def(pybind11::init<torch::Tensor, torch::Tensor, torch::Tensor, int64_t>(),
           pybind11::arg("a"), pybind11::arg("b_t"), pybind11::arg("cols"),
           pybind11::arg("room"));
  pybind11::class_<DecodeStack>(m, "DecodeStack", pybind11::module_local())
      .def(pybind11::init<>())
      .def("add_layer", &DecodeStack::add_layer)
      .def("set_lora", &DecodeStack::set_lora)
      .def("run", &DecodeStack::run, release())
      .def_property_readonly("num_layers", &DecodeStack::num_layers);
}

"""Video in: decoding files to the frames a video-language model sees
(docs/multimodal.md, "Video")."""

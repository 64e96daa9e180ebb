"""Run-time machinery: GPU detection, NVRTC compilation with a disk cache, launching."""

/* safetensors.c - STUB */
int sgrt_safetensors_stub(void);
int sgrt_safetensors_stub(void) { return 0; }

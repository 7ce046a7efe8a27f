/*
 * fuzz_frontend.c - libFuzzer target for the whole compiler, from text.
 *
 * The input bytes are a .sg file.  They go through every stage (whole.h):
 * the checks of `sgc check`, the IR round trip, --emit=dot, the memory
 * plan report, code generation and the interpreter.  The first byte's low
 * bit picks -O0 or -O2 for the passes.
 *
 * Build and run: see fuzz/README.md.
 */
#include "whole.h"

int
LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	/* The compiler gets a NUL-terminated copy, as main.c reads files. */
	char *src = xmalloc(size + 1);
	memcpy(src, data, size);
	src[size] = 0;
	(void)whole_check(&whole, src, size, size && (data[0] & 1) ? 0 : 2, NULL);
	free(src);
	return 0;
}

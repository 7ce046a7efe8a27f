/*
 * test_nvrtc.c - every kernel the CUDA backend generates compiles, checked
 * in-process with NVRTC, so that a template or emitter mistake in kernel
 * source shows without nvcc and without a GPU.
 *
 *   test_nvrtc FILE.sg...
 *
 * Each file goes through the whole compiler in this process (parse, sema,
 * every pass, codegen_module at -O0 and at -O2); the generated file's
 * device part (its host code is fenced off by __CUDACC_RTC__) is then
 * compiled for sm_90.  Files the front end rejects (the error tests) are
 * skipped; options in NAME.args (-D) are applied.  Prints one line per file
 * and level, and NVRTC's log on failure; exit 1 when any failed.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <nvrtc.h>

#include "sgc.h"
#include "backend.h"
#include "interp.h"
#include "passes.h"

#ifndef SGRT_INCLUDE /* runtime/: the device helpers and kernel library, sgk/ */
#define SGRT_INCLUDE "runtime"
#endif
#ifndef CUDA_INCLUDE
#define CUDA_INCLUDE "/usr/local/cuda/include"
#endif

/* The whole file at path, NUL-terminated; NULL when unreadable. */
static char *
slurp(const char *path, size_t *len)
{
	FILE *f = fopen(path, "rb");
	if (!f)
		return NULL;
	fseek(f, 0, SEEK_END);
	long n = ftell(f);
	fseek(f, 0, SEEK_SET);
	char *s = malloc((size_t)n + 1);
	if (s && fread(s, 1, (size_t)n, f) != (size_t)n) {
		free(s);
		s = NULL;
	}
	if (s)
		s[n] = 0;
	fclose(f);
	*len = (size_t)n;
	return s;
}

/* -D NAME=INT options of FILE's NAME.args into ov (at most 16). */
static int
defines(const char *path, DimOverride *ov)
{
	char args[4096];
	size_t len, n = strlen(path);
	if (n < 3 || n + 3 >= sizeof args)
		return 0;
	memcpy(args, path, n - 3);
	strcpy(args + n - 3, ".args");
	char *text = slurp(args, &len);
	int k = 0;
	if (!text)
		return 0;
	for (char *t = strtok(text, " \t\n"); t && k < 16; t = strtok(NULL, " \t\n")) {
		if (strcmp(t, "-D") == 0 && !(t = strtok(NULL, " \t\n")))
			break;
		if (strncmp(t, "-D", 2) == 0)
			t += 2;
		char *eq = strchr(t, '=');
		if (!eq || t[0] == '-')
			continue;
		ov[k].name = strndup(t, (size_t)(eq - t));
		ov[k].n = atoll(eq + 1);
		ov[k++].used = 0;
	}
	free(text);
	return k;
}

/* The CUDA text of path at opt_level into *cu (malloc'd); 0 when the front
 * end rejects the file, -1 when codegen failed. */
static int
generate(const char *path, int opt_level, char **cu)
{
	size_t len, culen = 0;
	char *src = slurp(path, &len);
	if (!src)
		return 0;
	Diag diag;
	diag_init(&diag, path, src, len);
	diag.out = fopen("/dev/null", "w");
	DimOverride ov[16];
	int nov = defines(path, ov);
	Module m = {.arena = arena_new(), .diag = &diag};
	AstFile ast = {0};
	int rc = 0;
	parse_file(src, len, &diag, m.arena, &ast);
	if (!diag.nerrors)
		sema_module(&m, &ast, ov, nov);
	PassOptions po = {.opt_level = opt_level};
	if (!diag.nerrors)
		passes_run(&m, &po);
	if (!diag.nerrors) {
		CodegenOptions co = {.opt_level = opt_level, .arch = "sm_90",
		                     .input = path, .emit_main = 1};
		FILE *f = open_memstream(cu, &culen);
		rc = codegen_module(&m, &co, f, NULL) ? 1 : -1;
		fclose(f);
		if (rc < 0) {
			free(*cu);
			*cu = NULL;
		}
	}
	fclose(diag.out);
	diag_fini(&diag);
	ast_free(&ast);
	module_free(&m);
	arena_free(m.arena);
	free(src);
	for (int i = 0; i < nov; i++)
		free((char *)ov[i].name);
	return rc;
}

/* Compiles cu with NVRTC; prints the log on failure.  1 when it compiled. */
static int
compile(const char *name, const char *cu)
{
	nvrtcProgram p;
	const char *opts[] = {"--gpu-architecture=sm_90", "-std=c++17",
	                      "-I" CUDA_INCLUDE, "-I" SGRT_INCLUDE};
	if (nvrtcCreateProgram(&p, cu, name, 0, NULL, NULL) != NVRTC_SUCCESS)
		return 0;
	nvrtcResult r = nvrtcCompileProgram(p, 4, opts);
	size_t n = 0;
	nvrtcGetProgramLogSize(p, &n);
	char *log = malloc(n + 1);
	nvrtcGetProgramLog(p, log);
	log[n] = 0;
	if (r != NVRTC_SUCCESS)
		printf("%s\n", log);
	free(log);
	nvrtcDestroyProgram(&p);
	return r == NVRTC_SUCCESS;
}

int
main(int argc, char **argv)
{
	int failed = 0, compiled = 0;
	ops_init();
	for (int i = 1; i < argc; i++) {
		for (int opt = 0; opt <= 2; opt += 2) {
			char *cu = NULL;
			int rc = generate(argv[i], opt, &cu);
			if (rc == 0)
				break; /* rejected by the front end: an error test */
			if (rc < 0) {
				printf("FAIL %s -O%d: the backend reported an error\n", argv[i], opt);
				failed++;
				continue;
			}
			if (compile(argv[i], cu)) {
				printf("ok %s -O%d\n", argv[i], opt);
				compiled++;
			} else {
				printf("FAIL %s -O%d: NVRTC rejected the kernels\n", argv[i], opt);
				failed++;
			}
			free(cu);
		}
	}
	printf("%d compiled, %d failed\n", compiled, failed);
	return failed || !compiled;
}

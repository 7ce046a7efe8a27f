/*
 * backend.h - the backends' entry points: CUDA C (codegen.c) and Graphviz
 * (dot.c).  Stage `backend` (compiler/README.md): reads the IR and what
 * the passes decided (passes.h), never the reverse.
 */
#ifndef BACKEND_H
#define BACKEND_H

#include "sgc.h"
#include "passes.h"

/* ------------------------------------------------------------------ codegen.c, codegen_*.c
 * The CUDA backend (`--emit=cu`); its files share compiler/backend/codegen.h.
 */

typedef struct {
	int opt_level;          /* 0: a kernel per op; 2: fusion */
	const char *arch;       /* "sm_90" */
	int cuda_graph;         /* --cuda-graph: replay each call as a CUDA graph */
	int emit_main;          /* --main */
	const char *input;      /* the .sg path as given */
	const char *header;     /* --header path (its base name is #included) */
	const char *output;     /* the .cu path, "-" or NULL: standard output */
	int no_line;            /* --no-line: no #line directives */
} CodegenOptions;

/* Writes the CUDA C of every graph of m to cu and, when h is not NULL, the
 * declarations of its C API.  Returns 0 after reporting through m->diag
 * (an op the backend cannot compile). */
int codegen_module(Module *m, const CodegenOptions *co, FILE *cu, FILE *h);

/* The kernels the backend makes of graph g at opt_level: kernel[i] is the
 * kernel that computes node i (nodes fused into one share it), numbered
 * from 0 in program order, or NONE for a node that launches none of its
 * own.  Returns the number of kernels.  (The fusion pass's groups, read
 * from g->sched, with the groups fused into a reduction's or row op's
 * kernel.) */
uint32_t codegen_kernels_of(Module *m, Graph *g, int opt_level, uint32_t *kernel);

/* `sgc check --memory`: for each graph (or only_graph), the static memory
 * plan the generated code reserves (memplan_report's format): the memplan
 * pass's (g->sched), so its device arena peak is the generated code's
 * `arena_bytes`; then the peak before fusion (what --offload-budget is
 * held to, docs/offload.md). */
void codegen_memory_report(FILE *f, Module *m, const char *only_graph, int opt_level);

/* The files of codegen_templates/, embedded by tools/embed.c. */
typedef struct {
	const char *name, *text;
} CgTemplateFile;
extern const CgTemplateFile cg_template_files[];
extern const unsigned cg_ntemplate_files;

/* ------------------------------------------------------------------ dot.c */

/* --emit=dot: Graphviz, one colour per stream, sync edges dashed. */
void dot_module(FILE *f, Module *m, const char *only_graph, int opt_level);

#endif /* BACKEND_H */

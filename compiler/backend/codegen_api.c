/*
 * codegen_api.c - what surrounds a graph's call: the tensor table, the
 * model struct, creation (streams, events, params, consts, pinned
 * buffers, NCCL), destruction, load and save, the call itself (eager or
 * through a CUDA graph), the typed C API, the --header declarations, and
 * the --main driver, which is libsgrt's sgrt_main over an SgrtProgram.
 */
#include <string.h>

#include "codegen.h"

/* The header-visible C type of a tensor element. */
static const char *
api_type(DType t)
{
	switch (t) {
	case DT_F64: return "double";
	case DT_F32: return "float";
	case DT_F16: case DT_BF16: return "uint16_t";
	case DT_I64: return "int64_t";
	case DT_I32: return "int32_t";
	default: return "uint8_t";
	}
}

/* The SgrtTensorDesc role constant of a CG_ROLE_*. */
static const char *
role_name(int role)
{
	static const char *const n[] = {
		"SGRT_ROLE_INPUT", "SGRT_ROLE_PARAM", "SGRT_ROLE_CONST",
		"SGRT_ROLE_STATE", "SGRT_ROLE_OUTPUT",
	};
	return n[role];
}

/* The rows of the SgrtTensorDesc table. */
static char *
tensor_rows(CgGraph *G)
{
	Cg *c = G->c;
	CgStr s = {0};
	for (uint32_t i = 0; i < G->tensors.n; i++) {
		const CgTensor *t = &G->tensors.v[i];
		const Type *ty = &t->type;
		CgStr shape = {0};
		for (int d = 0; d < ty->rank; d++)
			cg_str_itemf(&shape, ", ", "%lld", (long long)ty->d[d]);
		char *flags = "0";
		if (t->flags == (CG_TF_MUTATED | CG_TF_HOST))
			flags = "SGRT_TF_MUTATED | SGRT_TF_HOST";
		else if (t->flags & CG_TF_MUTATED)
			flags = "SGRT_TF_MUTATED";
		else if (t->flags & CG_TF_HOST)
			flags = "SGRT_TF_HOST";
		cg_str_addf(&s, "%s\t{\"%s\", %s, %s, %d, {%s}, %s},", i ? "\n" : "",
		            t->name, role_name(t->role), cg_sgrt_dtype((DType)ty->dt), ty->rank,
		            cg_str_done(c, &shape), flags);
	}
	return cg_str_done(c, &s);
}

/* "\"a\", \"b\"" for the streams after default, their priorities, and the
 * local events. */
static void
names(CgGraph *G, char **streams, char **prios, char **events)
{
	Cg *c = G->c;
	Graph *g = G->g;
	CgStr sn = {0}, sp = {0}, en = {0};
	for (uint32_t s = 1; s < g->streams.n; s++) {
		cg_str_itemf(&sn, ", ", "\"%s\"", g->streams.v[s].name);
		cg_str_itemf(&sp, ", ", "%d", g->streams.v[s].priority);
	}
	for (uint32_t e = 0; e < g->events.n; e++)
		if (!g->events.v[e].is_extern)
			cg_str_itemf(&en, ", ", "\"%s\"", g->events.v[e].name);
	*streams = cg_str_done(c, &sn);
	*prios = cg_str_done(c, &sp);
	*events = cg_str_done(c, &en);
}

/* The number of extern events of the graph. */
static int
nextern(CgGraph *G)
{
	int n = 0;
	for (uint32_t e = 0; e < G->g->events.n; e++)
		n += G->g->events.v[e].is_extern;
	return n;
}

/* n, or 1 for an array that C++ does not allow to be empty. */
static int
at_least_one(int n)
{
	return n > 0 ? n : 1;
}

/* The model struct and the functions that need no call body. */
static void
model(CgGraph *G, FILE *f)
{
	Cg *c = G->c;
	Graph *g = G->g;
	char *sn, *sp, *en;
	int ns = (int)g->streams.n - 1;
	names(G, &sn, &sp, &en);
	CG_EMIT(f, "api.cu:model", {"graph", g->name}, {"g", G->name},
	        {"where", cg_fmt(c, "%s:%u", cg_source_name(c), g->loc.line)},
	        {"ntensors", cg_num(c, at_least_one((int)G->tensors.n))},
	        {"tensors", tensor_rows(G)}, {"nstreams", ns ? cg_num(c, ns) : ""},
	        {"stream_names", sn}, {"stream_prios", sp},
	        {"nevents", G->nlocal_events ? cg_num(c, G->nlocal_events) : ""},
	        {"event_names", en}, {"nhost", cg_num(c, at_least_one(G->nhost))},
	        {"nfev", cg_num(c, at_least_one(G->nfree_events))},
	        {"nscratch", cg_num(c, at_least_one((int)G->scratch_bytes.n))},
	        {"next", cg_num(c, at_least_one(nextern(G)))});
	CG_EMIT(f, "api.cu:create_top", {"graph", g->name}, {"g", G->name},
	        {"source", cg_source_name(c)}, {"nstreams", cg_num(c, ns)},
	        {"stream_names_ptr", ns ? cg_fmt(c, "%s_stream_names", G->name) : "NULL"},
	        {"stream_prios_ptr", ns ? cg_fmt(c, "%s_stream_priorities", G->name) : "NULL"},
	        {"nevents", cg_num(c, G->nlocal_events)},
	        {"event_names_ptr", G->nlocal_events ? cg_fmt(c, "%s_event_names", G->name)
	                                             : "NULL"},
	        {"arena_bytes", cg_num(c, G->plan ? (int64_t)G->plan->peak : 0)});
	int line = (int)g->loc.line;
	for (uint32_t i = 0; i < G->tensors.n; i++) {
		const CgTensor *t = &G->tensors.v[i];
		if (t->role != CG_ROLE_PARAM && t->role != CG_ROLE_CONST &&
		    t->role != CG_ROLE_STATE)
			continue;
		int64_t bytes = type_numel(&t->type) * dtype_size((DType)t->type.dt);
		CG_EMIT(f, "api.cu:create_owned", {"k", cg_num(c, i)},
		        {"bytes", cg_num(c, bytes ? bytes : 1)}, {"name", t->name},
		        {"line", cg_num(c, g->vals.v[t->v].loc.line)});
	}
	for (uint32_t k = 0; k < G->scratch_bytes.n; k++)
		CG_EMIT(f, "api.cu:create_scratch", {"k", cg_num(c, k)},
		        {"bytes", cg_num(c, G->scratch_bytes.v[k])}, {"line", cg_num(c, line)});
	for (int k = 0; k < G->nhost; k++) {
		const Type *t = &g->vals.v[G->hostvals.v[k]].type;
		int64_t bytes = type_numel(t) * dtype_size((DType)t->dt);
		CG_EMIT(f, "api.cu:create_host", {"k", cg_num(c, k)}, {"bytes", cg_num(c, bytes ? bytes : 1)},
		        {"line", cg_num(c, g->vals.v[G->hostvals.v[k]].loc.line)});
	}
	for (int k = 0; k < G->nfree_events; k++)
		CG_EMIT(f, "api.cu:create_event", {"k", cg_num(c, k)}, {"line", cg_num(c, line)});
	if (G->has_collectives) {
		CG_EMIT(f, "api.cu:create_nccl", {"world", cg_num(c, G->world)}, {"line", cg_num(c, line)});
		cg_coll_reserve(G, f, line);
	}
	CG_EMIT(f, "api.cu:create_bottom", {"g", G->name}, {"ntensors", cg_num(c, G->tensors.n)},
	        {"nfev", cg_num(c, G->nfree_events)});
}

/* The typed call's parameters, its doc line, and the io assignments. */
static void
typed(CgGraph *G, char **params, char **doc, char **fill, char **ext)
{
	Cg *c = G->c;
	Graph *g = G->g;
	CgStr ins = {0}, outs = {0}, evs = {0}, din = {0}, dout = {0}, dev = {0}, fl = {0},
	      ex = {0};
	Map used; /* C parameter names: %a.b and %a_b are both a_b in C */
	map_init(&used);
	for (uint32_t i = 0; i < G->tensors.n; i++) {
		const CgTensor *t = &G->tensors.v[i];
		if (t->role != CG_ROLE_INPUT && t->role != CG_ROLE_OUTPUT)
			continue;
		int in = t->role == CG_ROLE_INPUT;
		const char *ty = api_type((DType)g->vals.v[t->v].type.dt);
		char *nm = cg_unique_ident(c, &used, in ? "in_" : "out_", t->name);
		const char *cst = in && !(t->flags & CG_TF_MUTATED) ? "const " : "";
		cg_str_addf(in ? &ins : &outs, ", %s%s *%s", cst, ty, nm);
		cg_str_itemf(&fl, "\n", "\tio[%u] = (void *)%s;", i, nm);
		cg_str_itemf(in ? &din : &dout, ", ", "%s", t->name);
	}
	for (uint32_t e = 0; e < g->events.n; e++) {
		if (!g->events.v[e].is_extern)
			continue;
		char *nm = cg_unique_ident(c, &used, "ev_", g->events.v[e].name);
		cg_str_addf(&evs, ", cudaEvent_t %s", nm);
		cg_str_itemf(&ex, ", ", "%s", nm);
		cg_str_itemf(&dev, ", ", "%s", g->events.v[e].name);
	}
	map_free(&used);
	*fill = cg_str_done(c, &fl);
	*ext = cg_str_done(c, &ex);
	char *i = cg_str_done(c, &ins), *e = cg_str_done(c, &evs), *o = cg_str_done(c, &outs);
	char *di = cg_str_done(c, &din), *de = cg_str_done(c, &dev), *dou = cg_str_done(c, &dout);
	*params = cg_fmt(c, "%s%s%s", i, e, o);
	*doc = cg_fmt(c, "inputs %s; %s%s%soutputs %s", *di ? di : "none",
	              *de ? "extern events " : "", de, *de ? "; " : "",
	              *dou ? dou : "none");
}

void
cg_graph_api(CgGraph *G)
{
	Cg *c = G->c;
	Graph *g = G->g;
	FILE *f = c->host;
	int ne = nextern(G);
	char *params, *doc, *fill, *ext;
	model(G, f);
	CG_EMIT(f, "api.cu:run_top", {"graph", g->name}, {"g", G->name},
	        {"source", cg_source_name(c)}, {"body", G->bodylen ? "1" : ""});
	if (G->bodylen)
		fwrite(G->bodytext, 1, G->bodylen, f);
	CG_EMIT(f, "api.cu:run_bottom", {"x", ""});
	if (c->co->cuda_graph)
		CG_EMIT(f, "api.cu:graph_run", {"g", G->name}, {"next_count", cg_num(c, ne)});
	typed(G, &params, &doc, &fill, &ext);
	CG_EMIT(f, "api.cu:call", {"g", G->name}, {"next_count", ne ? cg_num(c, ne) : ""},
	        {"next_text", cg_num(c, ne)},
	        {"next", cg_num(c, at_least_one(ne))},
	        {"runner", cg_fmt(c, "%s_%s", G->name, c->co->cuda_graph ? "graph_run" : "run")},
	        {"ntensors", cg_num(c, at_least_one((int)G->tensors.n))},
	        {"typed_doc", doc}, {"typed_params", params}, {"io_fill", fill},
	        {"ext_list", ext});
	if (c->hdr)
		CG_EMIT(c->hdr, "api.cu:header_graph", {"graph", g->name}, {"g", G->name},
		        {"where", cg_fmt(c, "%s:%u", cg_source_name(c), g->loc.line)},
		        {"typed_doc", doc}, {"typed_params", params},
		        {"ntensors", cg_num(c, (int)G->tensors.n)});
	free(G->bodytext);
	G->bodytext = NULL;
}

void
cg_main(Cg *c, CgGraph *G)
{
	CG_EMIT(c->host, "api.cu:program", {"graph", G->g->name}, {"g", G->name},
	        {"world", cg_num(c, G->world)}, {"ntensors", cg_num(c, G->tensors.n)},
	        {"next_count", cg_num(c, nextern(G))});
	CG_EMIT(c->host, "api.cu:main", {"graph", G->g->name}, {"g", G->name});
}

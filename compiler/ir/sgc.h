/*
 * sgc.h - the compiler's one internal header, a section per source file
 * (QBE style).  Every file of compiler/ and grammar/ includes it.
 *
 * Conventions:
 *   - Handles, not pointers: values and nodes are indices into their graph's
 *     arrays (ValId, NodeId).  NONE marks "no handle".
 *   - Memory: everything a compilation makes lives in one Arena, freed at
 *     once at exit (arena_free).
 *   - Exported functions carry their file's prefix (diag_, ast_, sema_, ...).
 */
#ifndef SGC_H
#define SGC_H

#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

#define SGC_VERSION "0.1.0"
#define SG_MAXRANK 8
#define NONE UINT32_MAX

typedef uint32_t ValId;
typedef uint32_t NodeId;

/* ------------------------------------------------------------------ util.c */

typedef struct Arena Arena;
Arena *arena_new(void);
void *arena_alloc(Arena *a, size_t n);          /* zeroed, 16-aligned */
char *arena_strndup(Arena *a, const char *s, size_t n);
char *arena_strdup(Arena *a, const char *s);
/* User text (a path, a name, a string attribute) made safe for generated
 * C/CUDA: every byte outside printable ASCII, and '"', '\\', '?' and
 * '*', becomes a 3-digit octal escape (\ooo).  The result decodes to s
 * exactly inside a C string literal or a #line file name, and is inert
 * text inside a comment of either kind (no end of comment, no line
 * splice, no trigraph).  text_c_string adds the quotes. */
char *text_escape(Arena *a, const char *s);
char *text_c_string(Arena *a, const char *s);
char *arena_vprintf(Arena *a, const char *fmt, va_list ap);
char *arena_printf(Arena *a, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));
char *arena_cat(Arena *a, const char *x, const char *y);
/* base's first bl bytes, sep (unless 0), n in decimal: "h.3", "free12". */
char *arena_numbered(Arena *a, const char *base, size_t bl, char sep, uint32_t n);
void arena_free(Arena *a);

/* Growable arrays: a struct with `T *v; uint32_t n, cap;` fields. */
#define VEC(T) struct { T *v; uint32_t n, cap; }
void vec_grow_(void **v, uint32_t *cap, uint32_t need, size_t elt);
#define vec_push(a, x)                                                       \
	do {                                                                  \
		if ((a)->n == (a)->cap)                                       \
			vec_grow_((void **)&(a)->v, &(a)->cap, (a)->n + 1,    \
			          sizeof(*(a)->v));                           \
		(a)->v[(a)->n++] = (x);                                       \
	} while (0)
#define vec_free(a) (free((a)->v), (a)->v = NULL, (a)->n = (a)->cap = 0)

/* A string -> uint32 hash map (open addressing).  Keys are byte strings
 * of the given length, not copied. */
typedef struct {
	const char *key;  /* NULL: an empty slot */
	uint32_t keylen, hash, val;
} MapSlot;
typedef struct {
	MapSlot *slot;    /* cap slots, cap a power of two (or 0) */
	uint32_t n, cap;
	uint32_t rewrites;/* map_puts to a key already there */
} Map;
void map_init(Map *m);
void map_free(Map *m);
/* Returns a pointer to the value slot, or NULL when absent. */
uint32_t *map_get(Map *m, const char *key, size_t len);
/* Inserts (or overwrites) and returns the slot. */
uint32_t *map_put(Map *m, const char *key, size_t len, uint32_t val);

/* Reports that n more bytes could not be had, and exits with status 1. */
_Noreturn void out_of_memory(size_t n);
void *xmalloc(size_t n);
void *xrealloc(void *p, size_t n);
/* Sorts n keys in ascending order.  Callers pack what they order by into
 * the high bits and an index into the low ones ((uint64_t)node << 32 | i),
 * so equal orders keep their indexes' order. */
void sort_u64(uint64_t *key, size_t n);
/* Internal compiler fault: message, then exit status 4 ("internal error"). */
_Noreturn void sgc_ice(const char *file, int line, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
#define ICE(...) sgc_ice(__FILE__, __LINE__, __VA_ARGS__)

/* Shortest decimal text that reads back as the same double ("1e-05",
 * "0.5", "inf", "-inf", "nan"); buf must hold 32 bytes. */
const char *fmt_double(char *buf, double d);

/* ------------------------------------------------------------------ types */

typedef enum {
	DT_F64, DT_F32, DT_F16, DT_BF16, DT_I64, DT_I32, DT_BOOL,
	DT__N,
	DT_ERR = 0xff, /* the type of a value whose statement failed to check */
} DType;

const char *dtype_name(DType t);            /* "f32" */
const char *dtype_st_name(DType t);         /* safetensors: "F32" */
int dtype_parse(const char *s, DType *out); /* 1 when s names a dtype */
int dtype_size(DType t);
int dtype_is_float(DType t);
int dtype_is_int(DType t); /* i64, i32 (not bool) */

typedef struct {
	uint8_t dt;      /* DType */
	uint8_t rank;
	uint8_t host;    /* 1: in pinned host memory (to_host's result) */
	int64_t d[SG_MAXRANK];
	int32_t sym[SG_MAXRANK]; /* dim-name index into Module.dims for a
	                            declared size, -1 otherwise (printing only) */
} Type;

int64_t type_numel(const Type *t);
int type_same_shape(const Type *a, const Type *b);
/* t viewed as [outer, len, inner] around dim d (len 1 for a scalar). */
void type_around(const Type *t, int d, int64_t *outer, int64_t *len, int64_t *inner);

/* ------------------------------------------------------------------ diag.c */

typedef struct {
	uint32_t line, col; /* 1-based; line 0: no location */
	uint32_t len;       /* length of the token for the ~~~ underline */
} Loc;

typedef struct Diag {
	const char *path;    /* as given on the command line */
	const char *src;     /* the whole file, NUL-terminated copy */
	size_t srclen;
	uint32_t *linestart; /* offsets of each line start, built lazily */
	uint32_t nlines;
	int nerrors, nwarnings;
	int max_errors;      /* stop reporting after this many (default 20) */
	int color;
	FILE *out;           /* stderr */
} Diag;

void diag_init(Diag *d, const char *path, const char *src, size_t len);
/* Source line `line` (1-based) without its line break: a pointer into the
 * source and its length in *len; NULL when there is no such line. */
const char *diag_line(Diag *d, uint32_t line, size_t *len);
void diag_fini(Diag *d);
/* "path:line:col: error: msg", the source line and a caret. */
void diag_error(Diag *d, Loc at, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
void diag_warning(Diag *d, Loc at, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
void diag_note(Diag *d, Loc at, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
void diag_vreport(Diag *d, const char *kind, Loc at, const char *fmt,
                  va_list ap);
/* True once max_errors was reached: callers stop producing work. */
int diag_full(const Diag *d);

/* "Did you mean": among the candidates offered, the one nearest to a
 * misspelt name by edit distance (insertions, deletions, substitutions),
 * within (length + 2) / 3 edits as Clang allows, and fewer edits than the
 * name's length; ties go to the first. */
typedef struct {
	const char *name;   /* the name the user wrote */
	const char *best;   /* NULL: none near enough yet */
	size_t dist;
} DiagSuggest;
void diag_suggest_init(DiagSuggest *s, const char *name);
void diag_suggest_add(DiagSuggest *s, const char *candidate);
/* "; did you mean 'PREFIXBEST'?" in buf, or "" when nothing is near. */
const char *diag_suggest_text(const DiagSuggest *s, const char *prefix,
                              char *buf, size_t cap);
/* Colour (-fdiagnostics-color): "auto" (standard error a terminal and
 * NO_COLOR unset), "always" or "never"; returns 0 for another word. */
int diag_color_mode(const char *mode, int *color);

/* ------------------------------------------------------------------ ast (parser.y, ast.c)
 * The parser produces a flat AST: one AstStmt per statement, in order.
 * Nesting (`with stream`, `backward {}`) is not a tree: each statement
 * records the innermost stream scope and whether it is inside a derived
 * backward block, so deep nesting costs no recursion anywhere.
 */

typedef enum {
	AA_VALUE,  /* %name            s = name without '%' */
	AA_INT,    /* i */
	AA_FLOAT,  /* f */
	AA_BOOL,   /* b */
	AA_STRING, /* s (escapes resolved) */
	AA_IDENT,  /* s: dtype, dim, stream, event or enum word */
	AA_LIST,   /* items, nitems (flat: items are not lists) */
} AstArgKind;

typedef struct AstArg {
	uint8_t kind;       /* AstArgKind */
	const char *key;    /* attribute name; NULL for a positional operand */
	Loc keyloc;
	Loc loc;            /* the value (a list: its '[') */
	const char *s;      /* AA_VALUE, AA_STRING, AA_IDENT */
	uint32_t slen;      /* length of s (strings may hold NUL) */
	int64_t i;          /* AA_INT */
	double f;           /* AA_FLOAT */
	int b;              /* AA_BOOL */
	struct AstArg *items; /* AA_LIST */
	uint32_t nitems;
} AstArg;

typedef struct {
	const char *name; /* a dim name, or NULL for a literal */
	int64_t n;        /* the literal */
	Loc loc;
} AstDim;

typedef struct {
	const char *dtype; /* as written, checked by sema */
	Loc dtloc;
	AstDim *dims;
	uint32_t ndims;
} AstType;

typedef enum {
	AS_INPUT, AS_PARAM, AS_CONST, /* name, type */
	AS_STREAM,        /* name (an ident), args: attributes (priority=) */
	AS_EVENT,         /* names */
	AS_EXTERN_EVENT,  /* names */
	AS_OP,            /* res (0..n), op, args */
	AS_DEL,           /* name (a value) */
	AS_OFFLOAD,       /* name (a value) */
	AS_BACKWARD,      /* args; has_block: a derived block follows */
	AS_BACKWARD_END,  /* the '}' closing a derived backward block */
	AS_OPTIMIZER,     /* op (the optimizer's name), args */
	AS_RETURN,        /* names (values) */
} AstStmtKind;

typedef struct AstStmt {
	uint8_t kind;       /* AstStmtKind */
	uint8_t has_block;  /* AS_BACKWARD: written with `{ ... }` */
	uint8_t in_backward;/* inside a derived `backward(...) { }` block */
	Loc loc;            /* first token of the statement */
	const char *name;   /* AS_INPUT/PARAM/CONST/STREAM/DEL/OFFLOAD */
	Loc nameloc;
	AstType type;       /* AS_INPUT/PARAM/CONST */
	const char **names; /* AS_EVENT, AS_EXTERN_EVENT, AS_RETURN, and the
	                       results of AS_OP */
	Loc *namelocs;
	uint32_t nnames;
	const char *op;     /* AS_OP, AS_OPTIMIZER */
	Loc oploc;
	AstArg *args;       /* AS_OP, AS_STREAM, AS_BACKWARD, AS_OPTIMIZER */
	uint32_t nargs;
	const char *stream; /* innermost `with stream(NAME)`; NULL: default */
	Loc streamloc;      /* the NAME in that `with stream(NAME)` */
} AstStmt;

typedef struct {
	const char *name;
	Loc loc;
	VEC(AstStmt) stmts;
} AstGraph;

typedef struct {
	const char *name;
	int64_t n;
	Loc loc;
} AstDimDecl;

typedef struct {
	VEC(AstDimDecl) dims;
	VEC(AstGraph) graphs;
} AstFile;

/* Parses src (which may hold NUL bytes and need not be UTF-8).  Syntax
 * errors are reported through d and counted; the AST holds every statement
 * that parsed.  Never recurses on the input's nesting depth. */
void parse_file(const char *src, size_t len, Diag *d, Arena *a, AstFile *out);

/* The scanner alone (grammar/lexer.l), for tests and tools. */
typedef struct Lexer Lexer;
typedef struct {
	int kind;         /* 0 at end of file; lexer_token_name names it */
	Loc loc;
	uint8_t bad;      /* the scanner reported an error for this token */
	const char *s;    /* IDENT, VALUE (without '%'), STRING, keywords */
	uint32_t slen;
	int64_t i;        /* INT; BOOL: 0 or 1 */
	double f;         /* FLOAT */
} LexToken;
Lexer *lexer_new(const char *src, size_t len, Diag *d, Arena *a);
int lexer_next(Lexer *lx, LexToken *t); /* the token's kind */
void lexer_free(Lexer *lx);
/* "NEWLINE", "IDENT", "VALUE", "STRING", "INT", "FLOAT", "BOOL", "EOF",
 * a keyword ("graph"), or the punctuation itself ("(", "}"). */
const char *lexer_token_name(int kind);

/* ------------------------------------------------------------------ ops.c (the op table)
 * ops.def lists every op once; see the comment at its top for the
 * operand, attribute and flag languages.
 */

typedef enum {
#define X(e, name, opnds, nres, attrs, shape, interp, flags, grad, emit, kernel) OP_##e,
#include "ops.def"
#undef X
	OP__N
} OpKind;

enum {
	OPF_POINTWISE = 1 << 0,  /* elementwise, broadcasting */
	OPF_INPLACE   = 1 << 1,  /* mutates its first operand */
	OPF_SYNC      = 1 << 2,  /* record/wait event, wait_stream, synchronize */
	OPF_COLLECTIVE= 1 << 3,  /* NCCL collective; 0 results: in place */
	OPF_COMPARE   = 1 << 4,  /* a comparison: bool result, operands compared
	                            in their promoted dtype */
	OPF_PROLOGUE  = 1 << 5,  /* takes a pointwise producer into its kernel */
	OPF_COMPILER  = 1 << 6,  /* normally made by the compiler */
	OPF_OPTRES    = 1 << 7,  /* 0 or 1 results (0: in place) */
	OPF_VARRES    = 1 << 8,  /* result count fixed by the shape rule */
	OPF_NOGRAD    = 1 << 9,  /* has no derivative */
	OPF_EPILOGUE  = 1 << 10, /* takes a pointwise consumer into its kernel */
	OPF_COSTLY    = 1 << 11, /* pointwise through a transcendental function
	                            (exp, erf, ...) or dropout's draws: dozens of
	                            instructions an element (FuseGroup.spread) */
	OPF_RANDOM    = 1 << 12, /* draws from the model's generator state opt.rng
	                            with its salt= (the front end numbers them;
	                            runtime/sgk/sgk_random.h) */
};

/* The CUDA backend's emitter families (ops.def's emitter column). */
typedef enum {
	EM_NONE,
	EM_POINTWISE,     /* codegen_kernels.c: pointwise groups */
	EM_REDUCE,        /* codegen_rows.c: RED reductions */
	EM_SOFTMAX,       /* codegen_rows.c */
	EM_NORM,          /* codegen_rows.c */
	EM_MSE_LOSS,      /* codegen_rows.c */
	EM_CROSS_ENTROPY, /* codegen_rows.c */
	EM_MATMUL,        /* codegen_gemm.c */
	EM_LINEAR,        /* codegen_gemm.c */
	EM_SDPA,          /* codegen_kernels.c: attention */
	EM_FLAT_COPY,     /* codegen_kernels.c: a copy of the bytes */
	EM_STRIDED,       /* codegen_kernels.c: a strided copy */
	EM_CAT,
	EM_SPLIT,
	EM_CREATION,
	EM_EMBEDDING,
	EM_GATHER,
	EM_RANDOM,        /* codegen_kernels.c: sgk_random.cuh's rand */
	EM_ZERO,
	EM_COLLECTIVE,    /* codegen_coll.c */
	EM_CONV,          /* codegen_conv.c: conv2d, pools, batch_norm, their backward */
	EM_GRAD,          /* codegen_grad.c: autograd's and the optimizer's ops */
	EM_HOST,          /* codegen_host.c: host statements, no kernel */
	EM__N
} EmitKind;

/* A pointwise op's formula (runtime/sgk/sgk_pointwise.h): the name NAME of
 * sgk_NAME_f/_d/_i, and the interpreter's forms (double and int64; the
 * ones of its arity, int ones NULL when the op never computes in
 * integers). */
typedef struct {
	const char *name;
	double (*d1)(double);
	double (*d2)(double, double);
	long long (*i1)(long long);
	long long (*i2)(long long, long long);
} PwFormula;

/* A reduction's identity and finish (ops.def's RED). */
enum { RED_ZERO, RED_ONE, RED_LOWEST, RED_HIGHEST };
enum { FIN_NONE, FIN_MEAN, FIN_VAR };

typedef enum {
	AT_INT,    /* an integer or a dim name */
	AT_FLOAT,  /* a float or an integer */
	AT_NUM,    /* int, float or bool: a value for a tensor element */
	AT_BOOL,
	AT_STR,    /* a double-quoted string, one of `choices` when given */
	AT_INTS,   /* a list of integers (dim names allowed) */
	AT_DTYPE,
	AT_STREAM, /* a declared stream (or default) */
	AT_EVENT,  /* a declared event */
	AT_IDENT,  /* any identifier (control_deps' sync=) */
} AttrType;

typedef struct {
	const char *name;
	uint8_t type;       /* AttrType */
	uint8_t required;   /* no default, must be given */
	uint8_t optional;   /* no default, may be absent (`name:T?`) */
	const char *deflt;  /* default as text, NULL when none */
	const char *choices;/* AT_STR: "sum|avg|max|min" */
} AttrSpec;

typedef struct Graph Graph;
typedef struct Node Node;
typedef struct Sema Sema;

/* Shape and dtype rule: reads operand types and attributes of n, writes the
 * types of its results into g.  Reports problems through d and returns 0. */
typedef int (*ShapeFn)(Graph *g, Node *n, Diag *d);
struct Interp;
struct Tensor;
/* Interpreter kernel (interp_*.c): computes the results of n. */
typedef int (*InterpFn)(struct Interp *I, Node *n, struct Tensor **in,
                        struct Tensor **out);
/* Derivative rule (grad_rules.c): see the autograd.c section. */
typedef struct Grad Grad;
typedef int (*GradFn)(Grad *G, const Node *n, const ValId *gout, ValId *gin,
                      const uint8_t *need);

typedef struct {
	const char *name;
	const char *opnds;  /* operand signature, see ops.def */
	int nres;           /* results (see OPF_OPTRES, OPF_VARRES) */
	const char *attrs;  /* attribute spec text */
	ShapeFn shape;
	InterpFn interp;
	uint32_t flags;
	GradFn grad;        /* NULL: no derivative */
	uint8_t emit;       /* EmitKind */
	PwFormula pw;       /* pointwise: its formula (pw.name NULL: none) */
	PwFormula pw_tanh;  /* the formula under approximate="tanh" */
	PwFormula combine;  /* reduction: its combine step (name NULL: none) */
	uint8_t ident;      /* reduction: RED_* */
	uint8_t finish;     /* reduction: FIN_* */
	uint8_t has_base;   /* in place: computes op `base` into operand 0 */
	uint16_t base;
	AttrSpec *attr;     /* parsed from attrs by ops_init */
	uint32_t nattr;
} OpInfo;

extern OpInfo op_table[OP__N]; /* owned by ops.c; filled by ops_init() */
void ops_init(void);
/* Parses an attribute spec text (the language of ops.def) into a malloc'd
 * array; `what` names its owner in internal-fault messages. */
uint32_t attrspec_parse(const char *text, AttrSpec **out, const char *what);
int op_lookup(const char *name, size_t len); /* OpKind, or -1 */
/* Index of the attribute called name in op's spec, or -1. */
int op_attr_index(int op, const char *name);

/* ------------------------------------------------------------------ ir.c
 * A graph is a list of nodes in program order.  Values are SSA: defined
 * once, by a declaration (input/param/const) or by one result of a node.
 * Passes that insert nodes build a new node list (ir_rebuild).
 */

typedef enum { VK_INPUT, VK_PARAM, VK_CONST, VK_NODE } ValKind;

typedef struct {
	const char *name; /* without '%' */
	Type type;
	uint8_t kind;     /* ValKind */
	uint8_t saved;    /* saved for backward (autograd marks it) */
	uint8_t offload;  /* `offload %v` was given */
	NodeId def;       /* VK_NODE: defining node */
	uint16_t resno;   /* VK_NODE: which result of def */
	uint8_t layout;   /* Layout: how its elements are stored (the layout pass) */
	Loc loc;          /* where the name is defined */
} Value;

/* The order a value's elements are stored in.  LAYOUT_ROW: row-major, the
 * language's own order; LAYOUT_CL (channels last, rank 4 only): a logical
 * [N, C, H, W] stored as [N, H, W, C] (a conv weight [K, C, R, S] as
 * [K, R, S, C]).  Only the layout pass (passes/layout.c) sets LAYOUT_CL,
 * on values that only layout-aware ops read and write; the interpreter
 * never sees it (it is the same tensor). */
enum { LAYOUT_ROW, LAYOUT_CL };

typedef enum {
	OK_VAL,    /* v: a value */
	OK_INT,    /* i: integer scalar literal */
	OK_FLOAT,  /* f: float scalar literal */
	OK_BOOL,   /* i: 0/1 */
	OK_STREAM, /* v: stream index (0 = default) */
	OK_EVENT,  /* v: event index */
} OpndKind;

typedef struct {
	uint8_t kind; /* OpndKind */
	uint32_t v;
	int64_t i;
	double f;
	Loc loc;
} Opnd;

/* After sema an attribute array holds one Attr per entry of the op's spec,
 * in spec order, defaults filled in (set = 0 for an absent optional one). */
typedef struct {
	uint8_t set;  /* given or defaulted */
	uint8_t type; /* AttrType of the spec */
	int64_t i;    /* AT_INT, AT_BOOL, AT_DTYPE, AT_STREAM, AT_EVENT */
	double f;     /* AT_FLOAT, AT_NUM */
	uint8_t num_kind; /* AT_NUM: OK_INT, OK_FLOAT or OK_BOOL */
	const char *s;/* AT_STR, AT_IDENT */
	int64_t *ints;/* AT_INTS */
	uint32_t nints;
	uint8_t one;  /* AT_INTS written as one integer, not a list */
	Loc loc;
} Attr;

/* control_deps carries extra attributes (the sync op's own); they sit after
 * the spec's attributes, with key set. */
typedef struct {
	const char *key;
	Attr a;
} ExtraAttr;

/* ops.c: fills an attribute from its spec's default (unset when it has
 * none). */
void attr_default(Arena *a, const AttrSpec *sp, Attr *out);
/* ops.c: a num attribute (fill_'s value, clamp's bounds) as a double or
 * an int64, the integer when the literal was one. */
double attr_num_f(const Attr *a);
int64_t attr_num_i(const Attr *a);
/* ops.c: the out-of-place op of an in-place arithmetic op (add_ -> add),
 * other ops unchanged. */
int op_inplace_base(int op);
/* ops.c: the pointwise formula node n computes (its approximate= variant
 * where it has one), NULL when none. */
const PwFormula *op_formula(const Node *n);

enum {
	NF_BACKWARD = 1 << 0, /* inside the derived backward block */
	NF_USER     = 1 << 1, /* written by the user (not compiler-made) */
	NF_DEAD     = 1 << 2, /* removed; skipped by everything, dropped on rebuild */
	NF_NOGRAD   = 1 << 3, /* its results carry no gradient, as if computed
	                         under torch.no_grad (functionalize's running
	                         statistics of a training batch_norm) */
};

struct Node {
	uint16_t op;      /* OpKind, or one of the OP_* pseudo ops below */
	uint16_t nopnd, nres, nattr, nextra;
	uint32_t flags;   /* NF_* */
	uint32_t stream;  /* stream index; 0 = default */
	Opnd *opnd;
	ValId *res;
	Attr *attr;
	ExtraAttr *extra;
	Loc loc;          /* the statement */
};

typedef struct {
	const char *name; /* "default" for index 0 */
	int priority;
	uint8_t has_priority;
	Loc loc;
} Stream;

typedef struct {
	const char *name;
	uint8_t is_extern;
	Loc loc;
} Event;

typedef struct {
	const char *name; /* "sgd", "adamw"; NULL when none */
	double lr, momentum, weight_decay, beta1, beta2, eps;
	int fused;
	Loc loc;
} Optimizer;

struct Graph {
	const char *name;
	Loc loc;
	struct Module *mod;
	VEC(Value) vals;
	VEC(Node) nodes;
	VEC(Stream) streams;  /* [0] is default */
	VEC(Event) events;
	VEC(ValId) inputs, params, consts; /* declaration order */
	VEC(ValId) rets;
	Loc retloc;
	Optimizer opt;
	Map valmap;           /* name -> ValId */
	Map streammap, eventmap;
	Map freshval, freshev; /* base -> next suffix to try (ir_value_fresh,
	                          ir_event_new): names are never freed */
	/* verify.c: the names of vals[0..nnamed) as last found by their name,
	 * when valmap had `rewrites` rewrites (then they still are, unless a
	 * name changed). */
	const char **named;
	uint32_t nnamed, named_rewrites;
	struct Sched *sched;  /* the backend's decisions (passes/schedule.c),
	                         made by the passes fusion, kernel_choice and
	                         memplan; NULL before fusion */
	void (*sched_free)(Graph *g); /* drops sched (module_free calls it;
	                         set with it, so the IR needs nothing of the
	                         passes) */
};

/* Pseudo ops: statements that are not ops of the table. */
enum {
	OP_DEL = OP__N,  /* opnd[0]: the value */
	OP_OFFLOAD,      /* opnd[0]: the value */
	OP_BACKWARD,     /* opnd[0]: the loss; attr 0 grad_sync (AT_STR, set or
	                    not); marks where backward stands.  NF_BACKWARD on
	                    this node: a derived block follows (the nodes up to
	                    OP_BACKWARD_END, each with NF_BACKWARD). */
	OP_BACKWARD_END, /* closes a derived block */
	OP_TOTAL
};
const char *op_name(int op);

typedef struct {
	const char *name;
	int64_t n;
	Loc loc;
} DimDecl;

typedef struct Module {
	Arena *arena;
	Diag *diag;
	VEC(DimDecl) dims;
	VEC(Graph *) graphs;
	Map dimmap;
	const char *only_graph; /* --graph NAME: analyse only that graph */
} Module;

Graph *ir_graph_new(Module *m, const char *name, Loc loc);
/* The size of dim WORLD, the number of ranks (predeclared as 1; a file or
 * -D may set it, even below 1, which shape rules report). */
int64_t ir_world(Module *m);
ValId ir_value_new(Graph *g, const char *name, ValKind k, Loc loc);
/* Appends a node; operands, results and attributes are arena copies. */
NodeId ir_node_add(Graph *g, const Node *proto);
/* Appends a value called `base` (made unique: base, base.1, ...) and
 * returns it: for compiler-made names. */
ValId ir_value_fresh(Graph *g, const char *base, Loc loc);
/* The name ir_value_fresh would give (an arena string), not yet taken. */
const char *ir_name_fresh(Graph *g, const char *base);
/* Finds an attribute of n by name: NULL when the op has no such attribute
 * or it is unset. */
const Attr *ir_attr(const Node *n, const char *name);
int64_t ir_attr_int(const Node *n, const char *name, int64_t dflt);
double ir_attr_float(const Node *n, const char *name, double dflt);
/* Whether n draws from the model's generator state opt.rng: a random op
 * (OPF_RANDOM), or attention with dropout_p > 0. */
int ir_draws(const Node *n);
const Type *ir_type(const Graph *g, const Opnd *o); /* NULL unless OK_VAL */
/* Operands of layer_norm_backward, rms_norm_backward (g, x, w?, r?): the
 * index of the weight, and of the gradient summed into dx (residual=true:
 * the last operand); -1 when absent. */
int ir_norm_bwd_weight(const Node *n);
int ir_norm_bwd_residual(const Node *n);
/* Free the heap arrays and maps of an AST and of a module's graphs (the
 * rest lives in the arena). */
void ast_free(AstFile *f);
void module_free(Module *m);

/* ------------------------------------------------------------------ shape.c */

/* A shape rule's error: "op: message" at `at` (n's statement when `at`
 * has no line), every result of n marked DT_ERR.  Returns 0. */
int shape_fail(Graph *g, Node *n, Diag *d, Loc at, const char *fmt, ...)
    __attribute__((format(printf, 5, 6)));
/* PyTorch's result_type over the operands of a pointwise op (tensors by
 * dimension class, scalars as Python scalars).  Returns DT_ERR if none. */
DType shape_result_type(Graph *g, const Node *n, int first, int count);
DType dtype_promote(DType a, DType b);
/* NumPy broadcast of a and b into out; 0 when incompatible. */
int shape_broadcast(const Type *a, const Type *b, Type *out);
/* Attention with enable_gqa (gqa): how many query heads (dim -3) each key
 * and value head serves (1 without, or with equal counts); 0 when the
 * key's count does not divide the query's. */
int64_t shape_attn_group(const Type *q, const Type *k, int gqa);
/* The broadcast batch dims of attention's q, k, v (all but the last two),
 * k's and v's heads counted as q's when group > 1.  0: they don't
 * broadcast. */
int shape_attn_batch(const Type *q, const Type *k, const Type *v, int64_t group, Type *out);
/* Normalises a possibly negative dim against rank; -1 when out of range. */
int shape_norm_dim(int64_t dim, int rank);
/* A 1-D tensor of size 0, which PyTorch's cat skips whatever the others'
 * shapes. */
int shape_legacy_empty(const Type *t);
/* An index of Python slicing: negative counts from the end, then clamped
 * to [0, size] (slice's start and end). */
int64_t shape_clamp_index(int64_t v, int64_t size);
/* Views' layouts, in elements (kernel_choice's folds, functionalize's
 * views): t's row-major strides; whether the dims of t other than size 1
 * have strides st's row-major ones; the strides bst of type b viewing,
 * in row-major order (a reshape), the elements of type a laid out with
 * strides ast, 0 when no strides can (PyTorch's view rule: each run of
 * a's dims that is contiguous in memory splits or merges only within
 * itself); the offset along its dim *dim of part v of node n (a result
 * of chunk or split, an operand of cat). */
void shape_row_strides(const Type *t, int64_t *st);
int shape_row_major(const Type *t, const int64_t *st);
int shape_view_strides(const Type *a, const int64_t *ast, const Type *b, int64_t *bst);
int64_t shape_part_start(const Graph *g, const Node *n, ValId v, int *dim);
/* Marks in red[0..rank) the dims a reduction node reduces: its `dims`
 * attribute, or every dim when absent or empty (as torch.sum(x, dim=[])). */
void shape_reduced_dims(const Node *n, int rank, int *red);
/* The batch dims of nop matrix operands (all but their last two; 1-d
 * operands have none; operand k has rank[k] dims d[k]), broadcast: fills
 * the batch shape and, per operand, each batch dim's element stride (0
 * where it broadcasts).  Returns the batch rank. */
int shape_batch_bcast(int nop, const int *rank, const int64_t *const *d,
                      int64_t *shape, int64_t st[][SG_MAXRANK]);
/* shape_batch_bcast for attention, operand 0 the query: with enable_gqa's
 * group > 1 the heads (the last batch dim) split into [kv heads, group],
 * the operands in the bit set kv (key, value, their gradients) stride 0
 * along the group, so each serves its group of query heads without a
 * copy.  Returns the batch rank (one more when split). */
int shape_attn_bcast(int nop, const int *rank, const int64_t *const *d, int64_t group,
                     unsigned kv, int64_t *shape, int64_t st[][SG_MAXRANK]);

/* ------------------------------------------------------------------ sema.c */

/* Builds checked IR graphs from the AST.  dims_override: -D values. */
typedef struct {
	const char *name;
	int64_t n;
	int used;
} DimOverride;

int sema_module(Module *m, AstFile *f, DimOverride *ov, int nov);

/* ------------------------------------------------------------------ print.c */

/* Prints the module as a .sg program that parses back to the same IR. */
void print_module(FILE *f, Module *m, const char *only_graph);
void print_graph(FILE *f, Graph *g);
/* print_graph with note(f, ctx, i) called at the end of node i's line
 * (before its newline), for a trailing comment. */
typedef void (*PrintNote)(FILE *f, void *ctx, NodeId i);
void print_graph_notes(FILE *f, Graph *g, PrintNote note, void *ctx);
/* Writes sep and "%v: channels last" for each result of node i stored
 * channels last (sep ", " after the first); returns the separator to use
 * next (sep when it wrote nothing): --dump-after's notes (schedule.c).
 * Not part of the program text: a printed program parses back row-major
 * throughout, its to_layout nodes plain copies. */
const char *print_layout_note(FILE *f, const Graph *g, NodeId i, const char *sep);

/* ------------------------------------------------------------------ build.c
 * The IR builder the passes share (and the IR-level facts they ask of
 * every node).
 */

/* The sync node n performs (record_event, wait_event, wait_stream,
 * synchronize; control_deps as its sync=; sync_dealloc as a wait_event),
 * or -1; *target gets the event or the waited-for stream. */
int ir_sync_of(const Node *n, uint32_t *target);
/* The edges that order the live nodes, each node's in this order: the
 * node before it on its stream (IR_AFTER_STREAM, via: the stream), the
 * last synchronize before it (IR_AFTER_BARRIER), and as its sync makes
 * it wait, the last record of the event it waits for (IR_AFTER_EVENT,
 * via: the event), the last node on the stream it waits for
 * (IR_AFTER_WAIT_STREAM, via: that stream, its own stream too), or the
 * last node on every stream (IR_AFTER_SYNCHRONIZE, via: each stream).
 * edge(ctx, from, to, kind, via) gets them in program order of `to`;
 * their transitive closure is the happens-before relation of the
 * streams' semantics.  The interpreter's --interleave, memplan's reach
 * and --emit=dot read it. */
typedef enum {
	IR_AFTER_STREAM,
	IR_AFTER_BARRIER,
	IR_AFTER_EVENT,
	IR_AFTER_WAIT_STREAM,
	IR_AFTER_SYNCHRONIZE,
} IrAfter;
typedef void (*IrOrderEdge)(void *ctx, NodeId from, NodeId to, IrAfter kind, uint32_t via);
void ir_order_edges(const Graph *g, IrOrderEdge edge, void *ctx);
/* Storage classes: root[v] is the first value of v's control_deps alias
 * class. */
void ir_alias_roots(const Graph *g, ValId *root);
/* The same with views: vpar[v] is the value v views (NONE: not a view), and
 * a view joins that value's class (races.c before functionalize). */
void ir_view_roots(const Graph *g, const ValId *vpar, ValId *root);
enum { RACC_NONE, RACC_READ, RACC_WRITE };
/* What node n does to value operand k: read it, write it in place (also
 * a read), or nothing (del, offload, control_deps, sync_dealloc...).
 * Inline: every walk asks it for every operand. */
static inline int
ir_access(const Node *n, uint32_t k)
{
	if (n->opnd[k].kind != OK_VAL || n->op >= OP__N || n->op == OP_CONTROL_DEPS ||
	    n->op == OP_SYNC_DEALLOC)
		return RACC_NONE;
	uint32_t f = op_table[n->op].flags;
	int inplace = (f & OPF_INPLACE) || ((f & OPF_COLLECTIVE) && n->nres == 0);
	return inplace && k == 0 ? RACC_WRITE : RACC_READ;
}
int ir_compiler_made(const Node *n); /* NF_BACKWARD or not NF_USER */
/* Readers of each value (operands of live nodes, and returns), a calloc'd
 * array of vals.n + 1 the caller frees. */
uint32_t *ir_use_counts(const Graph *g);
/* Attribute `name` of n (an ICE when n's op has none), marked set. */
Attr *ir_attr_set(Node *n, const char *name);
/* The node defining operand o when o is a value with one reader (uses:
 * ir_use_counts; NULL: any number of readers), made by op on stream s,
 * live and not in the backward block; else NULL. */
Node *ir_sole_def(Graph *g, const uint32_t *uses, const Opnd *o, int op, uint32_t s);
/* 1 with *x when operand o is a number literal (int or float). */
int ir_literal(const Opnd *o, double *x);
/* Node n turned into op over operands ops[nops] (arena copies), every
 * attribute at its default: the pattern passes' rewrite in place. */
void ir_node_become(Graph *g, Node *n, int op, const Opnd *ops, uint32_t nops);
/* The derived backward block: its `backward` node *bw and its end *end
 * (both NONE when the graph has none); 1 when there is one. */
int ir_backward_block(const Graph *g, NodeId *bw, NodeId *end);
/* Whether this compilation derived the block (bw, end): it holds
 * compiler-made nodes, where a written block holds the user's only. */
int ir_block_derived(const Graph *g, NodeId bw, NodeId end);
/* A fresh local event called base0, base1, ... */
uint32_t ir_event_new(Graph *g, const char *base);
/* A new stream called base, or base_1, base_2, ... when that is taken. */
uint32_t ir_stream_new(Graph *g, const char *base);
/* A fresh value name from base (its ".N" suffixes stripped); outside a
 * derived block the reserved "grad."/"opt." prefixes become "grad_"/"opt_". */
ValId ir_value_derived(Graph *g, const char *base, int in_block, Loc loc);
/* A node with op's attributes all unset (arena arrays): nopnd operands
 * and nres results left for the caller to fill. */
Node ir_node_make(Graph *g, int op, uint32_t nopnd, uint32_t nres,
                uint32_t stream, uint32_t flags, Loc loc);
/* record_event / wait_event (target: event), wait_stream (target: stream),
 * synchronize on stream s. */
Node ir_sync_node(Graph *g, int op, uint32_t target, uint32_t s, Loc loc);

/* Inserting nodes: each goes before old node `slot` (nodes.n: at the
 * end), ordered by rank then insertion order; NF_BACKWARD is set from the
 * slot; dead nodes are dropped and every result's def is fixed. */
typedef struct {
	uint32_t slot, rank;
	Node n;
} NodeIns;
typedef VEC(NodeIns) NodeInsVec;
void ir_insert(Graph *g, NodeInsVec *ins);

/* ------------------------------------------------------------------ conv.c, interp_conv.c, grad_conv.c
 * conv2d, the 2-D pools and batch_norm (NCHW), and their derivatives. */

/* The geometry of a conv2d or pool over x [N, C, H, W]: the kernel
 * [R, S], stride, padding, dilation (1 for pools) and the output
 * [N, K, OH, OW] (K: the conv's out channels, C for a pool). */
typedef struct {
	int64_t n, c, h, w, k, r, s, oh, ow, groups;
	int64_t stride[2], pad[2], dil[2];
} ConvGeom;
/* An INT or [h, w] attribute of n as two ints (dflt when unset); 0 when
 * it has another count. */
int conv_pair(const Node *n, const char *name, int64_t dflt, int64_t out[2]);
/* grad_ops.c: result i of n gets shape dims[rank] and dtype dt; an error
 * at the statement when the statement names fewer results. */
int shape_give(Graph *g, Node *n, Diag *d, uint32_t i, DType dt, const int64_t *dims, int rank);
/* The geometry of conv2d / max_pool2d / avg_pool2d node n (or its
 * backward) over input shape x[4] and, for a conv, weight shape w[4]
 * (NULL for a pool).  Assumes the shape rule has accepted n. */
void conv_geom(const Node *n, const int64_t *x, const int64_t *w, ConvGeom *cg);
/* adaptive_avg_pool2d's window [start, end) of output row i of o over
 * an input of size len (PyTorch's floor/ceil rule). */
int64_t conv_adaptive_start(int64_t i, int64_t o, int64_t len);
int64_t conv_adaptive_end(int64_t i, int64_t o, int64_t len);

#endif /* SGC_H */

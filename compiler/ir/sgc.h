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
	Loc loc;          /* where the name is defined */
} Value;

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
	                          races_event_new): names are never freed */
	/* verify.c: the names of vals[0..nnamed) as last found by their name,
	 * when valmap had `rewrites` rewrites (then they still are, unless a
	 * name changed). */
	const char **named;
	uint32_t nnamed, named_rewrites;
	struct Sched *sched;  /* the backend's decisions (schedule.c), made by
	                         the passes fusion, kernel_choice and memplan;
	                         NULL before fusion; dropped by module_free */
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
const Type *ir_type(const Graph *g, const Opnd *o); /* NULL unless OK_VAL */
/* Free the heap arrays and maps of an AST and of a module's graphs (the
 * rest lives in the arena). */
void ast_free(AstFile *f);
void module_free(Module *m);

/* ------------------------------------------------------------------ shape.c */

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

/* ------------------------------------------------------------------ verify.c */

/* Checks IR invariants; an invariant broken is an internal fault (ICE)
 * naming the pass that broke it. */
void verify_graph(Graph *g, const char *after_pass);

/* ------------------------------------------------------------------ print.c */

/* Prints the module as a .sg program that parses back to the same IR. */
void print_module(FILE *f, Module *m, const char *only_graph);
void print_graph(FILE *f, Graph *g);
/* print_graph with note(f, ctx, i) called at the end of node i's line
 * (before its newline), for a trailing comment. */
typedef void (*PrintNote)(FILE *f, void *ctx, NodeId i);
void print_graph_notes(FILE *f, Graph *g, PrintNote note, void *ctx);

/* ------------------------------------------------------------------ passes.c */

typedef struct {
	int allow_races;
	int opt_level;
	const char *dump_after; /* NULL, a pass name, or "all" */
	int test_drop_sync;     /* tests only: drop the N-th compiler-made sync
	                           (control_deps pass) and skip the race checks */
	int offload;            /* --offload: OFFLOAD_MARKED (0), _NONE, _AUTO */
	uint64_t offload_budget;/* --offload-budget: device bytes for auto */
	uint64_t bucket_bytes;  /* --bucket-bytes: grad_sync buckets; 0: 25 MiB */
	int no_remat;           /* --no-remat: keep every activation (remat.c) */
} PassOptions;

/* A pass returns 0 when a diagnostic error stops the pipeline, PASS_SAME
 * when it left the graph as it was (reads only, or found nothing to do:
 * the checks after it are skipped, as they passed on this graph already),
 * else 1. */
enum { PASS_SAME = 2 };
/* Runs the pipeline (a straight list, verifier after each) over every
 * graph.  Returns 0 when a diagnostic error stopped it. */
int passes_run(Module *m, const PassOptions *po);
int passes_known(const char *name);
void passes_list(FILE *f); /* the pass names, for --help and errors */

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

/* ------------------------------------------------------------------ interp.c, interp_*.c
 * The CPU reference interpreter (`sgc run`).  interp.c loads the files,
 * binds a tensor to every value, runs the nodes (in program order, or in a
 * random stream interleaving with --interleave) and writes the results;
 * interp_*.c hold the kernels named in ops.def and their helpers.
 */

typedef struct {
	const char *params, *inputs, *out; /* file paths or NULL */
	int steps;                          /* default 1 */
	uint64_t seed;                      /* default 0 */
	int interleave;                     /* --interleave=SEED given */
	uint64_t interleave_seed;
	int seed_inputs;    /* fuzzing: inputs missing from --inputs are
	                       initialised from --seed as params are */
	FILE *print;        /* returned values without --out: NULL, stdout */
	int allow_extra;    /* --allow-extra: ignore tensors of the files that
	                       match no name */
} RunOptions;
/* Runs graph g (checked, after all passes) on the CPU; returns the exit
 * status (0 ok, 1 mismatch between files and the graph, 3 I/O error),
 * having reported errors on stderr. */
int interp_run(Module *m, Graph *g, const RunOptions *ro);

/* A dense row-major tensor.  Control_deps results share their operand's
 * tensor (refs counts the values holding it). */
typedef struct Tensor {
	uint8_t dt;       /* DType */
	uint8_t rank;
	uint8_t keep;     /* input, param, const or returned: never freed */
	int32_t refs;     /* values that still hold it in this call */
	int64_t shape[SG_MAXRANK];
	int64_t numel;
	void *data;       /* numel * dtype_size(dt) bytes; NULL once freed */
} Tensor;

typedef struct Interp {
	Module *m;
	Graph *g;
	Tensor **val;     /* per ValId: its tensor in the current call */
	int interleave;   /* poison freed buffers instead of freeing them */
	VEC(Tensor *) owned; /* tensors allocated in the current call */
	struct OptimState *optim; /* interp_optim.c: optimizer state */
	struct InterpBlas *blas;  /* interp_linalg.c: OpenBLAS, once loaded */
} Interp;
/* Unloads what the first matrix product loaded (interp_linalg.c). */
void interp_blas_free(Interp *I);

/* Kernels (ops.def column 7) return 0, or 1 after reporting an error
 * (bad index...) through interp_fail.  out[j] is preallocated from the
 * result types; in[i] is NULL for a scalar literal operand. */
int interp_fail(Interp *I, const Node *n, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
Tensor *interp_tensor_new(Interp *I, DType dt, int rank, const int64_t *shape);
void interp_tensor_free(Tensor *t);
void interp_poison(Tensor *t);
/* Element i as a double (exact for every dtype but large i64) or int64
 * (floats truncated toward zero, NaN and out of range give INT64_MIN). */
double interp_getf(const Tensor *t, int64_t i);
/* A collective over the operands of every simulated rank (interp_shape.c). */
int interp_collective_world(Interp *I, Node *n, int world, Tensor **in, Tensor **out);
int64_t interp_geti(const Tensor *t, int64_t i);
/* Store v as element i, converted as Tensor.to(dtype) does: floats round to
 * nearest even (f16/bf16 through float), to integers truncate toward zero
 * (NaN and out of range give the type's minimum), to bool test v != 0. */
void interp_setf(Tensor *t, int64_t i, double v);
void interp_seti(Tensor *t, int64_t i, int64_t v);
/* v rounded to the precision PyTorch computes dtype dt in ("opmath": double
 * for f64, float for f32/f16/bf16); the identity for other dtypes. */
double interp_opmath(DType dt, double v);
/* Operand k of n as a double in dt's opmath (a tensor element or scalar). */
double interp_opndf(const Node *n, int k, Tensor *t, int64_t off, DType dt);
int64_t interp_opndi(const Node *n, int k, Tensor *t, int64_t off);

/* Broadcasting iteration over an output shape: off[k] follows operand k. */
typedef struct {
	int rank, nop;
	int64_t shape[SG_MAXRANK], idx[SG_MAXRANK];
	int64_t stride[4][SG_MAXRANK];
	int64_t off[4];
} BcastIter;
void interp_iter_init(BcastIter *it, int rank, const int64_t *shape,
                      Tensor **ops, int nop);
void interp_iter_next(BcastIter *it);
/* Row-major strides of a shape. */
void interp_strides(int rank, const int64_t *shape, int64_t *stride);

/* Attention's batch loop in the interpreter (interp_grad.c): the batch
 * shape and each tensor's batch strides (q, k, v, the mask, then any
 * given dk, dv: see shape_attn_bcast; NULL where absent), and the mask's
 * row and column strides. */
typedef struct {
	int brank;
	int64_t nb, shape[SG_MAXRANK], st[6][SG_MAXRANK];
	const Tensor *mask;
	int64_t mrs, mcs;
} AttnLoop;
void interp_attn_loop(AttnLoop *a, const Node *n, const Tensor *const t[6]);
/* Each tensor's offset for batch b. */
void interp_attn_offsets(const AttnLoop *a, int64_t b, int64_t *off);
/* What the mask adds to score (i, j) of the batch at mask offset moff: 0,
 * -inf (a false bool) or the float mask's value. */
double interp_attn_bias(const AttnLoop *a, int64_t moff, int64_t i, int64_t j);

/* interp_io.c: fills persist[v] for every input, param and const from the
 * files (or the deterministic initialisation); writes --out (or prints the
 * returned values, rets[i] for g->rets.v[i]).  Return exit statuses. */
/* interp_optim_load first: the optimizer state's names are known names
 * of --params. */
int interp_load(Interp *I, const RunOptions *ro, Tensor **persist);
/* An error of `sgc run` at a place of the source (a diagnostic). */
void interp_report(Interp *I, Loc at, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
int interp_save(Interp *I, const RunOptions *ro, Tensor **persist,
                Tensor **rets, const uint8_t *mutated);
void interp_print(FILE *f, const char *name, const Tensor *t);

/* ------------------------------------------------------------------ races.c
 * Happens-before over streams and events, and the race verifier (rule 2).
 * Positions: node i is at position i + 1; position 0 is the call start on
 * `default` (where inputs, params and consts are ready).  A clock holds,
 * per stream, the last position on it known complete (-1: none).  The
 * other stream passes (syncs.c, ctrldeps.c, dealloc.c, memplan.c,
 * functionalize.c) share these helpers.
 */

typedef struct {
	const Graph *g;
	uint32_t ns, ne, nn;
	int32_t *cur;       /* ns x ns: each stream's clock now */
	int32_t *ev;        /* ne x ns: each event's clock at its last record */
	uint8_t *recorded;  /* per event: recorded earlier in this call */
	int32_t *init;      /* ns x ns: each stream's clock at the call start */
	int32_t *after;     /* nn x ns: node i's stream clock just after i */
	NodeId *prevon;     /* per node: the previous live node on its stream */
	NodeId *laston;     /* per stream: the last node stepped on it */
	int no_dealloc;     /* take sync_dealloc for no sync (control_deps:
	                       only the program's syncs carry dependencies) */
} Hb;

void hb_init(Hb *h, const Graph *g);
void hb_free(Hb *h);
/* Applies node i (nodes are stepped in program order). */
void hb_step(Hb *h, NodeId i);
/* dst = max(dst, src) entrywise over h->ns streams. */
void hb_join(const Hb *h, int32_t *dst, const int32_t *src);
int32_t *hb_clock(Hb *h, uint32_t stream);      /* stream's clock now */
/* The clock of node i's stream just before i (after a full walk). */
const int32_t *hb_before(const Hb *h, NodeId i);
#define HB_DONE(clock, stream, pos) ((clock)[(stream)] >= (int32_t)(pos))

/* The sync node n performs (record_event, wait_event, wait_stream,
 * synchronize; control_deps as its sync=; sync_dealloc as a wait_event),
 * or -1; *target gets the event or the waited-for stream. */
int races_sync(const Node *n, uint32_t *target);
/* Storage classes: root[v] is the first value of v's control_deps alias
 * class. */
void races_roots(const Graph *g, ValId *root);
enum { RACC_NONE, RACC_READ, RACC_WRITE };
/* What node n does to value operand k: read it, write it in place (also
 * a read), or nothing (del, offload, control_deps, sync_dealloc...).
 * Inline: every walk asks it for every operand. */
static inline int
races_access(const Node *n, uint32_t k)
{
	if (n->opnd[k].kind != OK_VAL || n->op >= OP__N || n->op == OP_CONTROL_DEPS ||
	    n->op == OP_SYNC_DEALLOC)
		return RACC_NONE;
	uint32_t f = op_table[n->op].flags;
	int inplace = (f & OPF_INPLACE) || ((f & OPF_COLLECTIVE) && n->nres == 0);
	return inplace && k == 0 ? RACC_WRITE : RACC_READ;
}
int races_compiler_made(const Node *n); /* NF_BACKWARD or not NF_USER */
/* A fresh local event called base0, base1, ... */
uint32_t races_event_new(Graph *g, const char *base);
/* A fresh value name from base (its ".N" suffixes stripped); outside a
 * derived block the reserved "grad."/"opt." prefixes become "grad_"/"opt_". */
ValId races_value_new(Graph *g, const char *base, int in_block, Loc loc);
/* A node with op's attributes all unset (arena arrays): nopnd operands
 * and nres results left for the caller to fill. */
Node races_node(Graph *g, int op, uint32_t nopnd, uint32_t nres,
                uint32_t stream, uint32_t flags, Loc loc);
/* record_event / wait_event (target: event), wait_stream (target: stream),
 * synchronize on stream s. */
Node races_sync_node(Graph *g, int op, uint32_t target, uint32_t s, Loc loc);

/* Inserting nodes: each goes before old node `slot` (nodes.n: at the
 * end), ordered by rank then insertion order; NF_BACKWARD is set from the
 * slot; dead nodes are dropped and every result's def is fixed. */
typedef struct {
	uint32_t slot, rank;
	Node n;
} NodeIns;
typedef VEC(NodeIns) NodeInsVec;
void races_insert(Graph *g, NodeInsVec *ins);

/* One unordered pair of accesses found by races_walk. */
enum {
	RACE_RAW,        /* read or in-place write, the last write not
	                    ordered before it */
	RACE_WAR,        /* in-place write, an earlier read not ordered */
	RACE_FREE,       /* sync_dealloc or del, an access not ordered */
	RACE_AFTER_FREE, /* an access after sync_dealloc or del */
	RACE_RET,        /* a returned value not ordered before the end */
	RACE_JOIN,       /* a stream not joined into default at the end */
};
typedef struct {
	uint8_t kind;
	uint8_t pdef;     /* the earlier access is the value's definition */
	uint32_t k;       /* operand of the node; NONE at the end */
	ValId v;          /* the value accessed (for RACE_JOIN: NONE) */
	NodeId prev;      /* the earlier access; NONE: the call start */
	uint32_t pstream; /* its stream */
} Race;
/* Called with the races found at node i (nodes.n: the end of the call),
 * before i is stepped; it may join clocks (a sync it will insert). */
typedef void (*RaceFn)(void *ctx, Hb *h, NodeId i, Race *r, uint32_t nr);
enum { WALK_FREES = 1, WALK_END = 2 };
void races_walk(Graph *g, unsigned what, RaceFn fn, void *ctx);

/* Pass `races`: reports races at user nodes (errors, or warnings with
 * --allow-races); a race at a compiler-made node is an internal error. */
int races_pass(Graph *g, const PassOptions *po, Diag *d);
/* The verifier re-run after each later pass: returns 0 after reporting
 * a race at a user node (none with --allow-races).  ctrl_done: the
 * control_deps pass ran, so no bare sync may have values crossing it. */
int races_recheck(Graph *g, const PassOptions *po, Diag *d, const char *after,
                  int ctrl_done);
/* Write-after-read and write-after-write races of the user's in-place
 * ops, checked before functionalize rewrites them.  Returns 0 on error. */
int races_check_writes(Graph *g, const PassOptions *po, Diag *d);

/* ------------------------------------------------------------------ attention.c */

/* Pass `attention` (at -O2): matmul, scale, mask, softmax, matmul written
 * out becomes scaled_dot_product_attention (before autograd). */
int attention_pass(Graph *g, const PassOptions *po, Diag *d);

/* ------------------------------------------------------------------ syncs.c */

/* Pass `backward_syncs` (rule 3): a compiler-made node that reads (or
 * writes in place) a value whose last access on another stream is not
 * ordered before it gets record_event after that access and wait_event
 * before itself: one fresh event per producer and consuming stream. */
int syncs_pass(Graph *g, const PassOptions *po, Diag *d);
/* Pass `join_streams` (rule 0): wait_stream of every stream with unjoined
 * work into default at the end of the call, and into the backward
 * statement's stream at the end of a derived backward block. */
int syncs_join_pass(Graph *g, const PassOptions *po, Diag *d);

/* ------------------------------------------------------------------ ctrldeps.c */

/* Pass `control_deps` (rule 5): each bare sync op that values cross (made
 * before it, used after it across streams) becomes a control_deps node
 * passing them through; later uses read the aliases. */
int ctrldeps_pass(Graph *g, const PassOptions *po, Diag *d);
/* The verifier's half: a bare sync op that values cross means a pass
 * moved work across it (an internal error naming `after`). */
void ctrldeps_check(Graph *g, const char *after);

/* ------------------------------------------------------------------ fusion.c */

/* Fusion legality (rule 6): nodes fuse only within one region, a run of
 * one stream between two sync ops.  region[i] is NONE for nodes that are
 * no kernel (sync ops, del, offload, backward markers). */
typedef struct {
	uint32_t *region; /* per node */
	uint32_t nregions;
} FusionInfo;
void fusion_analyse(const Graph *g, FusionInfo *fi);
void fusion_free(FusionInfo *fi);
int fusion_legal(const Graph *g, NodeId a, NodeId b);
int fusion_pass(Graph *g, const PassOptions *po, Diag *d);
/* 1 when node n is computed by a pointwise kernel (a group's member). */
int fusion_pointwise(const Graph *g, const Node *n);

/* ------------------------------------------------------------------ memplan.c */

/* The static memory plan (rule 7): one buffer per storage class, placed in
 * the device arena (or the pinned host arena); a buffer reuses memory of an
 * earlier one only when every access of that one happens before it is
 * written.  Returned values are separate outputs; inputs, params and
 * consts belong to the caller and the model. */
enum { MEM_DEVICE, MEM_HOST, MEM_OUTPUT };
typedef struct {
	ValId v;          /* the class's first value */
	uint8_t where;    /* MEM_* */
	uint32_t stream;  /* allocating stream */
	NodeId alloc;     /* the node writing it first */
	NodeId last;      /* its last access */
	NodeId release;   /* its sync_dealloc, else its last access */
	uint64_t size, offset;
} MemBuf;
typedef struct {
	MemBuf *buf;
	uint32_t nbuf;
	uint32_t *bufof;  /* per value: index into buf, NONE when none */
	uint64_t peak, host_peak, outputs, unshared;
	int opt_level;
} MemPlan;
void memplan_build(Graph *g, int opt_level, MemPlan *mp);
/* memplan_build with def[v] as value v's defining node (NONE: no buffer)
 * instead of its Value's (sched_kernel_graph). */
void memplan_build_at(Graph *g, const NodeId *def, int opt_level, MemPlan *mp);
void memplan_free(MemPlan *mp);
/* The independent checker: explicit happens-before reachability; returns
 * 0 (with a reason in why[256]) if two buffers that may be live at once
 * share memory; -1 when the graph is too large to check (more than
 * MEMPLAN_VERIFY_MAX nodes: its cost is quadratic). */
enum { MEMPLAN_VERIFY_MAX = 20000 };
int memplan_verify(Graph *g, const MemPlan *mp, char *why);
void memplan_report(FILE *f, Graph *g, const MemPlan *mp);
/* `sgc check --memory`: the plan of each graph (or only_graph), checked
 * (an internal error if the checker finds an overlap). */
void memplan_report_module(FILE *f, Module *m, const char *only_graph,
                           int opt_level);
int memplan_pass(Graph *g, const PassOptions *po, Diag *d);

/* ------------------------------------------------------------------ schedule.c
 * What the passes fusion, kernel_choice and memplan decide for the backend,
 * stored on the graph (g->sched, freed with it): codegen emits what these
 * records say and decides nothing of it.
 *
 *   storage   (fusion)         alias classes and where each lives
 *   groups    (fusion)         pointwise nodes fused into one kernel, the
 *                              values kept in registers
 *   fold      (kernel_choice)  views read through a product's or attention
 *                              kernel's layout, activations run as
 *                              cuBLASLt epilogues, attention pairs
 *   plan      (memplan)        offsets over the program as its kernels run
 *                              it (sched_kernel_graph)
 */

/* Where an alias class's memory comes from. */
enum {
	ST_INPUT,  /* the caller's input buffer */
	ST_OUTPUT, /* the caller's output buffer (a returned value) */
	ST_PARAM,  /* model-owned device buffer (param, const) */
	ST_HOST,   /* model-owned pinned host buffer (to_host results) */
	ST_TEMP,   /* a temporary: the device arena at the plan's offset */
};

/* One alias class of values (control_deps results join their operand's). */
typedef struct {
	ValId root;
	uint8_t kind;         /* ST_* */
	uint8_t mutated;      /* written by an in-place op or collective */
	uint8_t dealloc;      /* released by a sync_dealloc node */
	NodeId release;       /* last node naming the class (or reading it
	                         through a folded view) */
	uint32_t streams;     /* bit s: stream s uses the class (s < 32) */
	NodeId *last_on;      /* [nstreams]: last node on each stream naming it */
} StoreClass;

/* A set of pointwise nodes fused into one kernel; at most SCHED_GROUP_MAX,
 * so that a kernel's size is bounded (a longer chain becomes several). */
enum { SCHED_GROUP_MAX = 64 };
typedef struct {
	NodeId *nodes;
	uint32_t n;
	int vec;              /* elements per thread for vectorised loads, 1: none */
	NodeId into;          /* the node whose input it computes in place
	                         (a fused producer, a prologue), or NONE */
	NodeId after;         /* the reduction or row op whose result it takes,
	                         computed where that kernel stores it (a fused
	                         consumer, an epilogue), or NONE */
} FuseGroup;
typedef VEC(FuseGroup) FuseGroups;

/* Autograd's softmax/log_softmax backward (f32), found at -O2 as a sum node
 * with its fused producer and consumer: dx from g and y (the forward's
 * output); one library kernel computes it. */
typedef struct {
	ValId g, y, dx;
	int log;
} SoftmaxBwd;

/* kernel_choice's decisions (-O2). */
typedef struct {
	ValId *src;       /* per value: a folded view's source, or NONE */
	uint8_t *trans;   /* per value: the view swaps src's last two dims (1),
	                     or is read by attention through strides (2) */
	NodeId *last;     /* per value: the last product reading a folded view */
	uint8_t *view;    /* per node: a folded view (no buffer, no kernel) */
	NodeId *act;      /* per node: the activation a product runs as its
	                     epilogue, or NONE */
	NodeId *prod;     /* per node: the product an activation is the
	                     epilogue of, or NONE */
	ValId *out;       /* per value: an attention result (or a view of
	                     one) written through the view making out[v], or
	                     NONE */
	uint8_t *outview; /* per node: such a view (no kernel) */
	NodeId *pair;     /* per node: the attention backward that reuses
	                     this forward's o and log-sum-exp, and back; NONE */
} KernelFold;

typedef struct Sched {
	Arena *a;             /* the module's arena: every array below */
	int opt_level;
	/* storage */
	ValId *root;          /* per value: its class's first value */
	StoreClass **cls;     /* per value: its class (shared by the class) */
	/* fusion */
	FuseGroups groups;
	int *group;           /* per node: its group, -1: none */
	int *prologue;        /* per node: the group fused into its operand 0, or -1 */
	int *epilogue;        /* per node: the group fused after its result, or -1 */
	uint8_t *reg;         /* per value: no memory (a register of its group,
	                         a folded view, a product's pre-activation) */
	SoftmaxBwd **softmax_bwd; /* per node: a sum that is autograd's softmax
	                         backward with its groups, one library kernel;
	                         NULL otherwise */
	/* kernel_choice */
	uint8_t *flash;       /* per node: an attention node the flash kernels
	                         take (else the fallback kernels) */
	KernelFold *fold;     /* NULL below -O2 */
	/* memplan */
	MemPlan plan;
	int planned;          /* plan was built */
	int unchecked;        /* --test-drop-sync dropped a sync on purpose:
	                         the verifier does not check the plan's reuse */
} Sched;

/* The graph's schedule, made empty (storage classes found) when absent;
 * sched_free drops it (its arrays stay in the module's arena). */
Sched *sched_get(Graph *g, int opt_level);
void sched_free(Graph *g);
/* The program as its kernels run it, for the memory plan: a copy f of g's
 * nodes (arrays in arena a) in which each fused group is one node at its
 * place, folded views and products' pre-activations have no buffer, a
 * product with an epilogue runs at its activation and attention kernels
 * write through their folded views.  f shares g's values (and, with
 * nothing fused or folded, its nodes: not to be written); the returned
 * array gives each value's defining node in f (NONE: no buffer), for
 * memplan_build_at. */
NodeId *sched_kernel_graph(const Graph *g, const Sched *s, Arena *a, Graph *f);
/* The value whose memory a product or attention kernel reads for operand
 * value v (through folded views); the value holding v's bytes when it is
 * written through views. */
ValId sched_operand_root(const Sched *s, ValId v);
ValId sched_out_end(const Sched *s, ValId v);
/* The element strides (st[rank of v]) of v's elements in the memory of
 * its folded source or written value: row-major unless v is a folded view
 * or written through one; 0 when they cannot be expressed as strides. */
int sched_fold_strides(const Graph *g, const KernelFold *F, ValId v, int64_t *st);
/* The verifier's part (verify.c): groups on one stream and one fusion
 * region in program order, links consistent, the plan's buffers sharing
 * bytes never live together (an internal error naming `after`). */
void sched_verify(Graph *g, const char *after);
/* --dump-after: g with each node's decisions as a trailing comment. */
void sched_print(FILE *f, Graph *g);

/* kernels.c: the kernel choice. */
int kernel_choice_pass(Graph *g, const PassOptions *po, Diag *d);
/* relu (1) or gelu(tanh) (2) as cuBLASLt epilogue code for node a, or 0. */
int kernel_activation(const Node *a);
/* The batch items of t (the product of all but its last two dims); the
 * broadcast batch of a matmul of a and b: its rank, item count and each
 * operand's element strides (0 where broadcast). */
int64_t kernel_batch_numel(const Type *t);
/* The broadcast batch dims (all but the last two) of nop <= 4 types: the
 * shape and each one's element strides (0 where broadcast); the rank. */
int kernel_batch_bcast(const Type **ops, int nop, int64_t *shape,
                       int64_t st[][SG_MAXRANK]);
int64_t kernel_matmul_batch(const Type *a, const Type *b, int *brank, int64_t *bshape,
                            int64_t st[][SG_MAXRANK]);
/* One tensor of a flash attention call as the kernels read or write it:
 * its type, its value (NONE: a contiguous temporary), its element strides
 * in the memory holding it (sched_fold_strides), the kernels' batch
 * strides and row stride. */
typedef struct {
	const Type *t;
	ValId v;
	const char *nm;
	int64_t st[SG_MAXRANK];
	int64_t s[2], sr;
} FlashT;
/* A flash call: the batch [nb0, nb1], the sizes and its tensors (q, k, v,
 * o, then for the backward dout, dq, dk, dv). */
typedef struct {
	int64_t nb[2], L, S, E, Ev;
	int64_t group;        /* enable_gqa: query heads a key head serves (1: none) */
	int nt;
	FlashT t[8];
	Type ot;              /* the backward's o: a contiguous temporary */
} Flash;
/* The flash call of attention node n (bwd: its backward) with the layouts
 * of F (NULL: none folded), checked: 0 when the dtype, shapes or layouts
 * need the fallback kernels. */
int kernel_flash(const Graph *g, const KernelFold *F, const Node *n, int bwd, Flash *f);

/* ------------------------------------------------------------------ dealloc.c */

/* Pass `sync_dealloc` (rule 8): a value some access of which, on another
 * stream than its allocation, is not ordered before the point where its
 * allocating stream is done with it (its `del`, else its last access)
 * gets record_event after that access and sync_dealloc there. */
int dealloc_pass(Graph *g, const PassOptions *po, Diag *d);

/* ------------------------------------------------------------------ offload.c, bucket.c
 * Activation offloading and gradient buckets (docs/offload.md), placed
 * with an estimate of time per node (offload.c's cost model).
 */

enum { OFFLOAD_MARKED, OFFLOAD_NONE, OFFLOAD_AUTO };

/* Pass `offload`: `offload %v` (and --offload=auto) become to_host on a
 * copy stream after the producer, a `del` of the device copy where the
 * copy should be done, and a to_device before the first backward use that
 * backward then reads. */
int offload_pass(Graph *g, const PassOptions *po, Diag *d);
/* Pass `grad_buckets`: grad_sync's all_reduces gathered into buckets of
 * --bucket-bytes, each reduced as one collective; updates wait for their
 * own bucket only. */
int buckets_pass(Graph *g, const PassOptions *po, Diag *d);
/* Estimated seconds: a node's compute on its stream, a host transfer of
 * bytes, an all_reduce of bytes over WORLD ranks. */
double offload_node_seconds(const Graph *g, const Node *n);
double offload_copy_seconds(uint64_t bytes);
double offload_collective_seconds(const Graph *g, uint64_t bytes);
/* t[i]: the estimated start of node i in program order, t[nodes.n] the
 * end (malloc'd). */
double *offload_timeline(const Graph *g);

/* ------------------------------------------------------------------ remat.c */

/* Pass `remat`: pointwise activations recomputed in backward from what
 * forward keeps anyway, where that lowers the peak (-O2). */
int remat_pass(Graph *g, const PassOptions *po, Diag *d);

/* ------------------------------------------------------------------ functionalize.c */

/* Pass `functionalize` (rule 9): in-place ops become out-of-place ops with
 * fresh values; later uses are renamed; a mutated input, param, const or
 * returned value is written back with copy_ before any later extern
 * record_event on the mutating stream, else at the end. */
int functionalize_pass(Graph *g, const PassOptions *po, Diag *d);

/* ------------------------------------------------------------------ dot.c */

/* --emit=dot: Graphviz, one colour per stream, sync edges dashed. */
void dot_module(FILE *f, Module *m, const char *only_graph, int opt_level);

/* ------------------------------------------------------------------ autograd.c, optim.c, grad_*.c
 * Reverse-mode differentiation (the `autograd` pass, docs/autograd.md).
 * A derivative rule (ops.def's `grad` column, grad_rules.c) is given the
 * forward node and the gradients of its results (NONE: no gradient) and
 * sets gin[k] for each operand k with need[k], or leaves it NONE (no
 * contribution).  It builds IR from other ops with the builder below:
 * every node it makes runs on the forward node's stream, is typed by its
 * op's own shape rule and is flagged NF_BACKWARD.  gin[k] may have a
 * broadcast shape or another float dtype: the pass sums and casts it to
 * the operand's type.  A rule returns 0 after reporting an error.
 */
int autograd_run(Graph *g, const PassOptions *po, Diag *d);

Opnd grad_v(ValId v);       /* a value operand */
Opnd grad_lf(double f);     /* a float literal */
Opnd grad_li(int64_t i);    /* an integer literal */
/* Operand k of the forward node as the rule may use it: a literal as it
 * is, a value as it was when the node ran (grad_in). */
Opnd grad_arg(Grad *G, const Node *n, int k);
/* The value of forward operand k or result j as the node saw it (a
 * snapshot when an in-place op changed it before backward). */
ValId grad_in(Grad *G, int k);
ValId grad_out(Grad *G, int j);
/* Names the rule's next temporaries after operand k's value. */
void grad_target(Grad *G, const Node *n, int k);
Graph *grad_graph(Grad *G);
const Type *grad_type(Grad *G, ValId v);
/* An error at the forward node's statement; returns 0. */
int grad_error(Grad *G, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

/* A node of op with operands ops and default attributes; set attributes,
 * then grad_end makes its nres results, types them and emits it. */
Node *grad_node(Grad *G, int op, const Opnd *ops, int nops);
void grad_set(Node *n, const char *name, int64_t i); /* int, bool, dtype */
void grad_setf(Node *n, const char *name, double f);
void grad_sets(Node *n, const char *name, const char *s);
void grad_setints(Grad *G, Node *n, const char *name, const int64_t *v, int nv);
void grad_copyattr(Node *n, const char *name, const Attr *src);
ValId grad_end(Grad *G, Node *n, uint32_t nres); /* the first result */
ValId grad_op1(Grad *G, int op, Opnd a);
ValId grad_op2(Grad *G, int op, Opnd a, Opnd b);
ValId grad_op3(Grad *G, int op, Opnd a, Opnd b, Opnd c);
ValId grad_sum(Grad *G, ValId x, uint32_t dims_mask, int keepdim);
ValId grad_reshape(Grad *G, ValId x, const int64_t *shape, int rank);
ValId grad_expand(Grad *G, ValId x, const Type *to);
ValId grad_transpose(Grad *G, ValId x, int d0, int d1);
ValId grad_zeros(Grad *G, const Type *t);
ValId grad_cast(Grad *G, ValId x, DType dt);
/* x summed over the dims broadcasting added to reach to's shape, and cast
 * to to's dtype. */
ValId grad_fit(Grad *G, ValId x, const Type *to);

/* optim.c: the update of param p from its gradient (sgd_update_ or
 * adamw_update_ with the graph's optimizer's settings), on stream s. */
void optim_update(Grad *G, ValId p, ValId grad, uint32_t s);

/* grad_rules.c: the derivative rules named in ops.def. */
#define GRAD_RULE(f) int f(Grad *G, const Node *n, const ValId *gout, \
                           ValId *gin, const uint8_t *need)
GRAD_RULE(grad_unary);
GRAD_RULE(grad_binary);
GRAD_RULE(grad_where);
GRAD_RULE(grad_clamp);
GRAD_RULE(grad_cast_rule);
GRAD_RULE(grad_reduce);
GRAD_RULE(grad_softmax);
GRAD_RULE(grad_norm);
GRAD_RULE(grad_matmul);
GRAD_RULE(grad_linear);
GRAD_RULE(grad_sdpa);
GRAD_RULE(grad_reshape_rule);
GRAD_RULE(grad_transpose_rule);
GRAD_RULE(grad_permute);
GRAD_RULE(grad_expand_rule);
GRAD_RULE(grad_slice);
GRAD_RULE(grad_cat);
GRAD_RULE(grad_split);
GRAD_RULE(grad_embedding);
GRAD_RULE(grad_gather);
GRAD_RULE(grad_loss);
GRAD_RULE(grad_memory);
GRAD_RULE(grad_inplace);
GRAD_RULE(grad_collective);
GRAD_RULE(grad_control_deps);
#undef GRAD_RULE

/* interp_optim.c: optimizer state in the interpreter, keyed by param
 * name ("opt.NAME.exp_avg"...): loaded from --params (missing state starts
 * fresh), kept across --steps, written to --out. */
int interp_optim_load(Interp *I, const RunOptions *ro);
uint32_t interp_optim_count(const Interp *I);
const char *interp_optim_name(const Interp *I, uint32_t i);
/* The name of the i-th state tensor the graph's updates use, present or
 * not; NULL past the last. */
const char *interp_optim_declared(const Interp *I, uint32_t i);
const Tensor *interp_optim_tensor(const Interp *I, uint32_t i);
void interp_optim_free(Interp *I);

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

/* interp_linalg.c: C[m,n] = A[m,k] * B[k,n] (B[n,k] transposed when bt),
 * row-major, in f64 (dgemm) or f32 (sgemm); 0 after reporting at n when
 * OpenBLAS cannot be loaded. */
int interp_gemm(Interp *I, const Node *n, int f64, int64_t m, int64_t nn, int64_t k,
                const void *a, const void *b, int bt, void *c);

#define GRAD_RULE(f) int f(Grad *G, const Node *n, const ValId *gout, \
                           ValId *gin, const uint8_t *need)
GRAD_RULE(grad_conv2d);
GRAD_RULE(grad_pool2d);
GRAD_RULE(grad_batch_norm);
#undef GRAD_RULE

#endif /* SGC_H */

/* verify.c - STUB */
#include "sgc.h"
void verify_graph(Graph *g, const char *after_pass) { (void)g; (void)after_pass; }

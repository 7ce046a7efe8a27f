/* print.c - STUB */
#include "sgc.h"
void print_module(FILE *f, Module *m, const char *only_graph) { (void)f; (void)m; (void)only_graph; }
void print_graph(FILE *f, Graph *g) { (void)f; (void)g; }

/* main.c - STUB */
#include "sgc.h"
int main(void) { ops_init(); return 0; }

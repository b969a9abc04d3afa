/* optimizer.c - (being written: issue 3). */
#include "internal.h"

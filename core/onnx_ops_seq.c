#include "onnx_internal.h"
const OxOp floe__onnx_ops_seq[] = {{NULL, NULL, NULL}};

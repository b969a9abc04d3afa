#include "onnx_internal.h"
const OxOp floe__onnx_ops_train[] = {{NULL, NULL, NULL}};

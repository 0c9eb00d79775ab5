/**
 * Protobuf wire types and the onnx.proto field numbers kvdesk reads by hand:
 * the package reader (src/main/packages/onnx-reader.ts) and the engine's
 * last-position copy (src/main/engine/last-position.ts). Stable since ONNX IR
 * version 3.
 */
export const WIRE_VARINT = 0;
export const WIRE_FIXED64 = 1;
export const WIRE_LEN = 2;
export const WIRE_FIXED32 = 5;

// Field numbers from onnx.proto (stable since IR version 3), and the data types used here.
export const MODEL_IR_VERSION = 1;
export const MODEL_GRAPH = 7;
export const MODEL_OPSET_IMPORT = 8;
export const OPSET_DOMAIN = 1;
export const OPSET_VERSION = 2;
export const GRAPH_NODE = 1;
export const GRAPH_NAME = 2;
export const GRAPH_INITIALIZER = 5;
export const GRAPH_INPUT = 11;
export const GRAPH_OUTPUT = 12;
export const GRAPH_VALUE_INFO = 13;
export const VALUE_INFO_NAME = 1;
export const VALUE_INFO_TYPE = 2;
export const TYPE_TENSOR = 1;
export const TENSOR_TYPE_ELEM = 1;
export const TENSOR_TYPE_SHAPE = 2;
export const SHAPE_DIM = 1;
export const DIM_VALUE = 1;
export const NODE_INPUT = 1;
export const NODE_OUTPUT = 2;
export const NODE_NAME = 3;
export const NODE_OP_TYPE = 4;
export const NODE_ATTRIBUTE = 5;
export const NODE_DOMAIN = 7;
export const ATTR_NAME = 1;
export const ATTR_F = 2;
export const ATTR_I = 3;
export const ATTR_T = 5;
export const ATTR_G = 6;
export const ATTR_INTS = 8;
export const ATTR_GRAPHS = 11;
export const ATTR_TYPE = 20;
export const TENSOR_DIMS = 1;
export const TENSOR_DATA_TYPE = 2;
export const TENSOR_NAME = 8;
export const TENSOR_INT64_DATA = 7;
export const TENSOR_RAW_DATA = 9;
export const TENSOR_EXTERNAL_DATA = 13;
export const TENSOR_DATA_LOCATION = 14;
export const ENTRY_KEY = 1;
export const ENTRY_VALUE = 2;
export const DATA_LOCATION_EXTERNAL = 1;
export const TENSOR_FLOAT = 1;
export const TENSOR_UINT8 = 2;
export const TENSOR_INT8 = 3;
export const INT64 = 7;
export const TENSOR_BOOL = 9;
export const TENSOR_FLOAT16 = 10;

# The ONNX protobuf classes (Debian's libonnx_proto on libprotobuf): the
# importer reads models with them, the runtime reads TensorProto files and
# writes trained models with them. Found by library and header so that the
# runtime also builds from the copies scripts/collect-device-deps.sh makes
# (no CMake package there).
find_path(GPIPE_ONNX_PROTO_INCLUDE_DIR onnx/onnx-ml.pb.h REQUIRED)
find_library(GPIPE_ONNX_PROTO_LIBRARY onnx_proto REQUIRED)
find_path(GPIPE_PROTOBUF_INCLUDE_DIR google/protobuf/message_lite.h REQUIRED)
find_library(GPIPE_PROTOBUF_LIBRARY protobuf REQUIRED)
add_library(gpipe_onnx_proto INTERFACE)
target_link_libraries(gpipe_onnx_proto INTERFACE ${GPIPE_ONNX_PROTO_LIBRARY}
                      ${GPIPE_PROTOBUF_LIBRARY})
target_include_directories(gpipe_onnx_proto SYSTEM INTERFACE
                           ${GPIPE_ONNX_PROTO_INCLUDE_DIR}
                           ${GPIPE_PROTOBUF_INCLUDE_DIR})
# Debian builds the library with ONNX_ML (onnx-ml.proto) in namespace onnx.
target_compile_definitions(gpipe_onnx_proto INTERFACE ONNX_ML=1
                           ONNX_NAMESPACE=onnx)

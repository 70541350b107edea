// NumPy .npy files (format versions 1-3): reading and atomic writing.
#ifndef GPIPE_RUNTIME_NPY_H
#define GPIPE_RUNTIME_NPY_H

#include "gpipe/runtime/Tensor.h"

#include <cstdint>
#include <map>
#include <set>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

namespace gpipe::runtime {

/// A file that is not a readable .npy array; the message names the file.
class NpyError : public std::runtime_error {
public:
  using std::runtime_error::runtime_error;
};

/// What a .npy header says: the array's type and shape, and where its
/// data starts and how long it is.
struct NpyHeader {
  DType dtype = DType::F32;
  std::vector<int64_t> shape;
  uint64_t dataOffset = 0, dataBytes = 0;
};
/// Parses the header at the start of `bytes` (the data need not follow);
/// `name` is used in error messages.
NpyHeader parseNpyHeader(std::string_view bytes, const std::string &name);
/// Parses the bytes of a .npy file; `name` is used in error messages.
HostTensor parseNpy(std::string_view bytes, const std::string &name);
/// Reads a .npy file.
HostTensor readNpy(const std::string &path);
/// The bytes of a version 1.0 .npy file holding `tensor`.
std::string serializeNpy(const HostTensor &tensor);
/// Writes a .npy file atomically (temporary file, then rename).
void writeNpy(const std::string &path, const HostTensor &tensor);

/// Reads every array of a NumPy .npz archive (numpy.savez or
/// numpy.savez_compressed), keyed by name without the ".npy".
std::map<std::string, HostTensor> readNpz(const std::string &path);
/// Reads the arrays of a .npz archive named in `only` (all when null); the
/// others are neither read nor decompressed. Names `only` holds that the
/// archive lacks are not an error: the caller checks what it got.
std::map<std::string, HostTensor> readNpz(const std::string &path,
                                          const std::set<std::string> *only);
/// The names of the arrays in a .npz archive, in archive order.
std::vector<std::string> npzArrayNames(const std::string &path);

/// An array left in its file: `shape` of `dtype`, C order, its data at
/// byte `offset` of `path` (row r of a [N, ...] array at offset + r times
/// the row's bytes).
struct ArrayInFile {
  std::string path;
  uint64_t offset = 0;
  DType dtype = DType::F32;
  std::vector<int64_t> shape;
};
/// Where the arrays of a .npz archive named in `only` lie in it, for
/// those stored uncompressed (numpy.savez; ZIP64 archives too): they can
/// be read a part at a time without loading them. Compressed members
/// (numpy.savez_compressed) and absent names are left out.
std::map<std::string, ArrayInFile>
locateNpzArrays(const std::string &path, const std::set<std::string> &only);

} // namespace gpipe::runtime

#endif // GPIPE_RUNTIME_NPY_H

// NumPy .npy files (format versions 1-3): reading and atomic writing.
#ifndef GPIPE_RUNTIME_NPY_H
#define GPIPE_RUNTIME_NPY_H

#include "gpipe/runtime/Tensor.h"

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

} // namespace gpipe::runtime

#endif // GPIPE_RUNTIME_NPY_H

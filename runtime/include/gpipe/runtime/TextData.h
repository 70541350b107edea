// Plain text as byte-level language-modelling data.
#ifndef GPIPE_RUNTIME_TEXTDATA_H
#define GPIPE_RUNTIME_TEXTDATA_H

#include "gpipe/runtime/Tensor.h"

#include <string>

namespace gpipe::runtime {

/// The bytes of a text file cut into sequences of `length` tokens: row i
/// of `tokens` holds bytes [i * length, (i + 1) * length) as int64 ids in
/// [0, 256), row i of `labels` the bytes one further on (the next byte of
/// each position). Throws std::runtime_error, naming the file, when it
/// cannot be read or holds no more than `length` bytes.
struct TokenDataset {
  HostTensor tokens, labels;
};
TokenDataset readByteSequences(const std::string &path, int64_t length);

/// Whether `path` is a zip archive (an .npz) by its first bytes.
bool isZipFile(const std::string &path);

} // namespace gpipe::runtime

#endif // GPIPE_RUNTIME_TEXTDATA_H

// IDX files (MNIST, Fashion-MNIST), plain or gzip-compressed.
#ifndef GPIPE_RUNTIME_IDX_H
#define GPIPE_RUNTIME_IDX_H

#include "gpipe/runtime/Tensor.h"

#include <string>

namespace gpipe::runtime {

/// Reads an IDX file (.gz or not) of unsigned bytes as a uint8 tensor.
HostTensor readIdx(const std::string &path);

/// A labelled image data set in the layout of Debian's
/// dataset-fashion-mnist: <dir>/<split>-images-idx3-ubyte[.gz] and
/// <dir>/<split>-labels-idx1-ubyte[.gz], split "train" or "t10k". Images
/// become float32 [N, 1, H, W] scaled to [0, 1], labels int64 [N].
struct ImageDataset {
  HostTensor images, labels;
};
ImageDataset readIdxDataset(const std::string &dir, const std::string &split);

} // namespace gpipe::runtime

#endif // GPIPE_RUNTIME_IDX_H

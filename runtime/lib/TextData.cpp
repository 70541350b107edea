#include "gpipe/runtime/TextData.h"

#include <cstring>
#include <fstream>
#include <iterator>
#include <stdexcept>

using namespace gpipe::runtime;

bool gpipe::runtime::isZipFile(const std::string &path) {
  std::ifstream in(path, std::ios::binary);
  char magic[4] = {};
  return in.read(magic, 4) && std::memcmp(magic, "PK\x03\x04", 4) == 0;
}

TokenDataset gpipe::runtime::readByteSequences(const std::string &path,
                                               int64_t length) {
  if (length <= 0)
    throw std::runtime_error(path + ": the sequence length must be positive");
  std::ifstream in(path, std::ios::binary);
  if (!in)
    throw std::runtime_error(path + ": cannot open the file");
  std::string bytes((std::istreambuf_iterator<char>(in)),
                    std::istreambuf_iterator<char>());
  if (in.bad())
    throw std::runtime_error(path + ": read error");
  int64_t rows = (static_cast<int64_t>(bytes.size()) - 1) / length;
  if (rows <= 0)
    throw std::runtime_error(path + ": " + std::to_string(bytes.size()) +
                             " bytes of text, fewer than one sequence of " +
                             std::to_string(length) +
                             " tokens and its next byte");
  TokenDataset ds;
  for (HostTensor *t : {&ds.tokens, &ds.labels}) {
    t->dtype = DType::I64;
    t->shape = {rows, length};
    t->data.resize(rows * length * sizeof(int64_t));
  }
  auto *tokens = reinterpret_cast<int64_t *>(ds.tokens.data.data());
  auto *labels = reinterpret_cast<int64_t *>(ds.labels.data.data());
  for (int64_t i = 0; i < rows * length; ++i) {
    tokens[i] = static_cast<unsigned char>(bytes[i]);
    labels[i] = static_cast<unsigned char>(bytes[i + 1]);
  }
  return ds;
}

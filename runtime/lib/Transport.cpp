#include "Transport.h"

namespace gpipe::runtime {

std::string MessageKey::str() const {
  return std::string(kind == MessageKind::Activation ? "activations"
                                                     : "gradients") +
         " of micro-batch " + std::to_string(microBatch) + " from stage " +
         std::to_string(from) + " to stage " + std::to_string(to);
}

} // namespace gpipe::runtime

#include "Transport.h"

namespace gpipe::runtime {

std::string MessageKey::str() const {
  std::string what =
      kind == MessageKind::TiedGradient
          ? "gradient of shared weight " + std::to_string(microBatch)
          : std::string(kind == MessageKind::Activation ? "activations"
                                                        : "gradients") +
                " of micro-batch " + std::to_string(microBatch);
  return what + " from stage " + std::to_string(from) + " to stage " +
         std::to_string(to);
}

} // namespace gpipe::runtime

#ifndef GPIPE_RUNTIME_MESSAGEPACKING_H
#define GPIPE_RUNTIME_MESSAGEPACKING_H

#include "DeviceBackend.h"

#include "gpipe/runtime/Bundle.h"

#include <vector>

namespace gpipe::runtime {

/// Copies the tensors of `layout` from the sending phase's `outputs` in
/// `arena` into `message` at their offsets; an entry in bfloat16
/// (MessageLayout::Entry::bf16) rounded as the receiver's products round
/// it (DeviceBackend::roundToBf16, a device whose memory is the host's).
void packMessage(DeviceBackend &device, const MessageLayout &layout,
                 const std::vector<TensorSlot> &outputs, const char *arena,
                 char *message);

/// Copies the tensors of `layout` from `message` into the receiving
/// phase's `inputs` in `arena`, a bfloat16 entry widened back to float32.
void unpackMessage(DeviceBackend &device, const MessageLayout &layout,
                   const std::vector<TensorSlot> &inputs, const char *message,
                   char *arena);

} // namespace gpipe::runtime

#endif // GPIPE_RUNTIME_MESSAGEPACKING_H

#include "MessagePacking.h"

namespace gpipe::runtime {

void packMessage(DeviceBackend &device, const MessageLayout &layout,
                 const std::vector<TensorSlot> &outputs, const char *arena,
                 char *message) {
  for (const MessageLayout::Entry &e : layout.tensors) {
    const TensorSlot &slot = outputs[e.slot];
    if (e.bf16)
      device.roundToBf16(message + e.offset, arena + slot.offset,
                         slot.numElements());
    else
      device.copyToHost(message + e.offset, arena + slot.offset,
                        slot.byteSize());
  }
}

void unpackMessage(DeviceBackend &device, const MessageLayout &layout,
                   const std::vector<TensorSlot> &inputs, const char *message,
                   char *arena) {
  for (const MessageLayout::Entry &e : layout.tensors) {
    const TensorSlot &slot = inputs[e.slot];
    if (e.bf16)
      device.widenBf16(arena + slot.offset, message + e.offset,
                       slot.numElements());
    else
      device.copyToDevice(arena + slot.offset, message + e.offset,
                          slot.byteSize());
  }
}

} // namespace gpipe::runtime

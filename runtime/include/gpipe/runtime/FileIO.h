// Whole-file reads and atomic whole-file writes, shared by every file format
// the runtime reads or writes.
#ifndef GPIPE_RUNTIME_FILEIO_H
#define GPIPE_RUNTIME_FILEIO_H

#include <optional>
#include <stdexcept>
#include <string>
#include <string_view>

namespace gpipe::runtime {

/// A file that could not be written; the message names the file.
class FileWriteError : public std::runtime_error {
public:
  using std::runtime_error::runtime_error;
};

/// The bytes of the file at `path`, or nullopt when it cannot be opened.
std::optional<std::string> readFileBytes(const std::string &path);

/// Writes `bytes` to `path` atomically: to `path`.tmp, then renamed into
/// place, so a reader never sees a partial file and an old file survives a
/// failed write. Throws FileWriteError naming `path`.
void writeFileAtomically(const std::string &path, std::string_view bytes);

} // namespace gpipe::runtime

#endif // GPIPE_RUNTIME_FILEIO_H

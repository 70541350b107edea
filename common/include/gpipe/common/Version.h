// gpipe's version (the CMake project's), as both tools print it.
#ifndef GPIPE_COMMON_VERSION_H
#define GPIPE_COMMON_VERSION_H

namespace gpipe {

#ifndef GPIPE_VERSION
#error "GPIPE_VERSION comes from common/CMakeLists.txt"
#endif
constexpr const char *kVersion = GPIPE_VERSION;

} // namespace gpipe

#endif // GPIPE_COMMON_VERSION_H

// Lookups in the contract's (value, name) tables.
#ifndef GPIPE_COMMON_NAMETABLE_H
#define GPIPE_COMMON_NAMETABLE_H

#include <cstddef>
#include <optional>
#include <string_view>
#include <utility>

namespace gpipe::detail {

template <typename E, size_t N>
std::string_view nameIn(const std::pair<E, std::string_view> (&table)[N],
                        E value) {
  for (const auto &[v, name] : table)
    if (v == value)
      return name;
  return "?";
}

template <typename E, size_t N>
std::optional<E> valueIn(const std::pair<E, std::string_view> (&table)[N],
                         std::string_view name) {
  for (const auto &[v, n] : table)
    if (n == name)
      return v;
  return std::nullopt;
}

} // namespace gpipe::detail

#endif // GPIPE_COMMON_NAMETABLE_H

// modules/golden/case_json.hpp (internal) — the fields of a case.json, each of the kind it must be.
//
// case.json is the one file of a golden case that is text (golden/FORMAT.md). Every field
// is read through case_field, which says which field is missing or of the wrong kind:
// an integer where 8.5 or 1e300 is given is an error, not a cast.
//
// Not part of the API: not exported, namespace mha::detail.
//
// Included by modules/golden.cppm, in its module purview: no module line of its own.
// Uses mha.core.

namespace mha::detail {

// Whether a JSON value is exactly of V's kind: an integer in V's range for an integral V
// (8.5 is not read as 8, nor 1e300 cast out of range), any number for double, true or
// false for bool, a string for std::string.
template <class V>
bool json_holds(const nlohmann::json& value) {
  if constexpr (std::is_same_v<V, bool>) {
    return value.is_boolean();
  } else if constexpr (std::is_integral_v<V>) {
    if (value.is_number_unsigned())
      return value.get<std::uint64_t>() <= static_cast<std::uint64_t>(std::numeric_limits<V>::max());
    return value.is_number_integer() && value.get<std::int64_t>() >= std::numeric_limits<V>::min() &&
           value.get<std::int64_t>() <= std::numeric_limits<V>::max();
  } else if constexpr (std::is_floating_point_v<V>) {
    return value.is_number();
  } else {
    return value.is_string();
  }
}

// V's kind as the messages name it.
template <class V>
constexpr std::string_view json_kind_name() {
  if constexpr (std::is_same_v<V, bool>) return "true or false";
  else if constexpr (std::is_integral_v<V>) return "an integer";
  else if constexpr (std::is_floating_point_v<V>) return "a number";
  else return "a string";
}

// The field `section.key` (`key` at the top level when section is null), of V's kind.
template <class V>
V case_field(const nlohmann::json& j, const char* section, const char* key, const std::string& where) {
  const nlohmann::json* node = &j;
  if (section) {
    if (!j.contains(section) || !j[section].is_object())
      throw Error(fmt::format("{}: case.json has no '{}' object", where, section));
    node = &j[section];
  }
  if (!node->contains(key))
    throw Error(
        fmt::format("{}: case.json is missing '{}{}{}'", where, section ? section : "", section ? "." : "", key));
  const nlohmann::json& value = (*node)[key];
  if (!json_holds<V>(value))
    throw Error(fmt::format("{}: case.json field '{}{}{}': expected {}, got {}", where, section ? section : "",
                            section ? "." : "", key, json_kind_name<V>(), value.dump()));
  return value.template get<V>();
}

}  // namespace mha::detail

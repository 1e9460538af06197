// The standard and third-party headers of every mha module unit, in one fixed order.
//
// Each partition includes this file in its global module fragment. Clang 16 compares
// the global-module declarations of partitions that import each other, and reports
// false ODR mismatches (in libstdc++'s <compare>) when their fragments include the
// same headers in different orders; one shared list keeps them identical.
#pragma once

#include <algorithm>
#include <atomic>
#include <cmath>
#include <compare>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <exception>
#include <filesystem>
#include <fstream>
#include <functional>
#include <initializer_list>
#include <iterator>
#include <limits>
#include <map>
#include <memory>
#include <mutex>
#include <numbers>
#include <optional>
#include <random>
#include <span>
#include <stdexcept>
#include <string>
#include <string_view>
#include <thread>
#include <type_traits>
#include <utility>
#include <variant>
#include <vector>

// nlohmann_json includes <ranges> in C++20 mode; clang 16 cannot merge <ranges> across
// module units, and the library needs none of it.
#define JSON_HAS_RANGES 0

#include <fmt/format.h>
#include <fmt/ranges.h>
#include <nlohmann/json.hpp>

#include <xtensor/xarray.hpp>
#include <xtensor/xmanipulation.hpp>
#include <xtensor/xreducer.hpp>
#include <xtensor/xtensor.hpp>
#include <xtensor/xstrided_view.hpp>
#include <xtensor/xview.hpp>
#include <xtensor-blas/xblas.hpp>

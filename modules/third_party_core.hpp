// The standard headers and fmt: the global module fragment of every mha module unit that
// needs neither xtensor nor nlohmann_json, and the first part of the two files that add them.
//
// Three files, each the one before with more headers after it, so that every unit's
// fragment is a prefix of one fixed list (see third_party.hpp for why the order is fixed).
// A unit includes the shortest one that has what it uses: clang 16 writes each unit's
// fragment into its BMI again, merged with everything the unit imports, and a unit without
// xtensor in its fragment compiles in less than half the time (the .npy dtypes' unit, when
// each file was a partition of its own: 18 s instead of 45; a whole Release build on 2
// cores: 1207 s instead of 1525).
//   third_party_core.hpp    the standard library and fmt
//   third_party_xtensor.hpp ... and xtensor, xtensor-blas
//   third_party.hpp         ... and nlohmann_json: the whole list
#pragma once

#include <algorithm>
#include <array>
#include <atomic>
#include <cmath>
#include <compare>
#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <deque>
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
#include <unordered_map>
#include <utility>
#include <variant>
#include <vector>

#include <pthread.h>  // pthread_setname_np: the pool's threads are named mha-pool (platform/threads.hpp)
#include <sched.h>    // sched_getaffinity: the CPUs this process may run on (platform/threads.hpp)

// nlohmann_json includes <ranges> in C++20 mode; clang 16 cannot merge <ranges> across
// module units, and the library needs none of it.
#define JSON_HAS_RANGES 0

#include <fmt/format.h>
#include <fmt/ranges.h>

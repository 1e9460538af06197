// The standard and third-party headers of every mha module unit, in one fixed order.
//
// Each module unit includes this file in its global module fragment. Clang 16 compares
// the global-module declarations of units that import each other, and reports
// false ODR mismatches (in libstdc++'s <compare>) when their fragments include the
// same headers in different orders; one shared list keeps them identical.
//
// The list is cut in three (third_party_core.hpp, third_party_xtensor.hpp, then the rest
// here), each including the one before; a unit that needs less includes less.
#pragma once

#include "third_party_xtensor.hpp"

#include <nlohmann/json.hpp>

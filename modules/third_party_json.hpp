// The standard headers, fmt and nlohmann_json: the global module fragment of the units that
// read JSON and need no xtensor (third_party_core.hpp explains the three files).
#pragma once

#include "third_party_core.hpp"

#include <nlohmann/json.hpp>

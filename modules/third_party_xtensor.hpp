// The standard headers, fmt, xtensor and xtensor-blas: the global module fragment of the units
// that compute with tensors and read no JSON, the textbook, the platform, the engine and the
// API, and what a program that imports mha includes (third_party_core.hpp explains the three files).
#pragma once

#include "third_party_core.hpp"

#include <xtensor/xarray.hpp>
#include <xtensor/xmanipulation.hpp>
#include <xtensor/xreducer.hpp>
#include <xtensor/xtensor.hpp>
#include <xtensor/xstrided_view.hpp>
#include <xtensor/xview.hpp>
#include <xtensor-blas/xblas.hpp>

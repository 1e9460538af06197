// modules/golden.cppm — the golden cases that PyTorch wrote, and checking the library against them.
//
// `import mha.golden;` next to `import mha;` gives what the mha-golden tool, the golden
// tests and the tutorials use. A case is a folder in the format of golden/FORMAT.md; its
// tensors are .npy files, read through mha.io. Read the files in this order:
//   cases.hpp   finding case folders, case.json (every field checked), loading the tensors
//   check.hpp   building the module of a case, running it, comparing with PyTorch's tensors
// Each is a file of modules/golden/. Internal code is in namespace mha::detail, not
// exported: case_json.hpp reads each field of case.json as the kind it must be.
//
// One module unit, each file one idea: docs/building.md says why.
module;
#include "third_party.hpp"

export module mha.golden;

import mha;
import mha.core;
import mha.io;

// check(), mha.core's helper, called unqualified by the files below.
namespace mha {
using detail::check;
}  // namespace mha

#include "golden/case_json.hpp"
#include "golden/cases.hpp"
#include "golden/check.hpp"

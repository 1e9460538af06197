// mha.golden: the golden cases that PyTorch wrote, and checking the library against them.
//
// `import mha.golden;` next to `import mha;` gives what the mha-golden tool, the golden
// tests and the tutorials use. A case is a folder in the format of golden/FORMAT.md; its
// tensors are .npy files, read through mha.io. Read the partitions in this order:
//   :cases   finding case folders, case.json (every field checked), loading the tensors
//   :check   building the module of a case, running it, comparing with PyTorch's tensors
// Internal code is in namespace mha::detail: :case_json, an implementation partition that
// is not exported, reads each field of case.json as the kind it must be.
export module mha.golden;

export import :cases;
export import :check;

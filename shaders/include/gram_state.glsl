// The Gram filter's per-sequence state layout: the one declaration that
// gram.comp includes and the kernel registry reads for the driver (the
// descriptor lua/divgpu/kernels/gram.lua names this file as its
// state_layout; lua/divgpu/kernel.lua parses the `const uint` lines below
// from the embedded copy), so the shader and the driver cannot disagree.
//
// state_u32, per sequence: the item appended last (its G' row, mask and
// centroid row are still to apply), window sizes summed, windows of one,
// fallbacks, the largest window, and the window-size histogram. Bins: sizes
// 1, 2, 3-4, 5-8, ..., 129-256, 257 and more; the last bin counts empty
// windows (impossible under the theorem; counted to show it).
const uint GRAM_S_PREVIOUS = 0u;
const uint GRAM_S_WINDOW_TOTAL = 1u;
const uint GRAM_S_WINDOW_ONES = 2u;
const uint GRAM_S_FALLBACKS = 3u;
const uint GRAM_S_WINDOW_MAX = 4u;
const uint GRAM_S_HIST = 5u;
const uint GRAM_HIST_BINS = 11u;
const uint GRAM_STATE_U32 = 16u;
// state_f64, per sequence: T (the sum of the chosen items' norm bounds) and
// the instrumented build's max |exact - approx| / bound.
const uint GRAM_T_NORMS = 0u;
const uint GRAM_T_RATIO = 1u;
const uint GRAM_STATE_F64 = 2u;

// The push-constant block of the scan shaders, declared once for every shape.
// Rust reads its size from the SPIR-V and refuses a dispatch that pushes a
// different size.
layout(push_constant) uniform Push {
    uint num_items;   // N: candidates in the table
    uint dim;         // D: values per row
    uint step;        // t: the step this dispatch appends (1 .. L-1)
    uint ring;        // slots per sequence in the winners ring buffer
#if SHAPE == SHAPE_TILED
    uint tile_size;   // candidates per tile of the in-shader tile loop
#elif SHAPE == SHAPE_TILE_DISPATCH
    uint tile_begin;  // this dispatch scans candidates [tile_begin, tile_end)
    uint tile_end;
    uint phase;       // PHASE_SCAN: one tile; PHASE_DECIDE: fp16-exact's exact pass and the update
#endif
} pc;

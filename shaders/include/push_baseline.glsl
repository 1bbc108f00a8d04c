// The push-constant block of the scan shaders, declared once. Rust reads its
// size from the SPIR-V and refuses a dispatch that pushes a different size.
layout(push_constant) uniform Push {
    uint num_items;  // N: candidates in the table
    uint dim;        // D: values per row
    uint step;       // t: the step this dispatch appends (1 .. L-1)
    uint ring;       // slots per sequence in the winners ring buffer
} pc;

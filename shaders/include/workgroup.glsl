// Workgroup reductions over subgroups: one subgroup operation, one barrier,
// then every subgroup folds the per-subgroup partials itself (no second
// barrier before the result is used). Needs, declared before the include:
// `shared double red_f64[]` and `shared dvec2 red_f64x2[]` with one slot per
// subgroup at least.
#extension GL_KHR_shader_subgroup_basic : require
#extension GL_KHR_shader_subgroup_arithmetic : require

dvec2 workgroup_sum2(dvec2 x) {
    x = subgroupAdd(x);
    if (subgroupElect()) red_f64x2[gl_SubgroupID] = x;
    // Orders each subgroup's partial before any subgroup folds them.
    barrier();
    dvec2 total = dvec2(0.0lf);
    for (uint k = gl_SubgroupInvocationID; k < gl_NumSubgroups; k += gl_SubgroupSize) total += red_f64x2[k];
    total = subgroupAdd(total);
    // Orders the reads of red_f64x2 before its next reuse.
    barrier();
    return total;
}

double workgroup_min(double x) {
    x = subgroupMin(x);
    if (subgroupElect()) red_f64[gl_SubgroupID] = x;
    // Orders each subgroup's partial before any subgroup folds them.
    barrier();
    double lowest = uint64BitsToDouble(0x7ff0000000000000ul);  // +inf
    for (uint k = gl_SubgroupInvocationID; k < gl_NumSubgroups; k += gl_SubgroupSize) lowest = min(lowest, red_f64[k]);
    lowest = subgroupMin(lowest);
    // Orders the reads of red_f64 before its next reuse.
    barrier();
    return lowest;
}

double workgroup_max(double x) {
    return -workgroup_min(-x);
}

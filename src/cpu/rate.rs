//! What a CPU job costs, for `auto` and for choosing between the Gram filter
//! and the direct path: three rates (seconds per unit of work on the whole
//! machine) and the estimate they give. `measure::measure` times them on a
//! small table on this machine; `DEFAULT` is a 2-core development machine's.


/// How the steps are computed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Plan {
    /// The certified Gram filter.
    Gram,
    /// Every candidate's chain every step.
    Direct,
}

impl Plan {
    pub fn name(self) -> &'static str {
        match self {
            Plan::Gram => "gram",
            Plan::Direct => "direct",
        }
    }
}

/// Seconds per unit of work, all threads together.
#[derive(Clone, Copy, Debug)]
pub struct Rates {
    /// G's build, per N² x D (one f64 fma of one G entry).
    pub build: f64,
    /// A Gram step, per N (one approx add, the window's pass) per sequence-step.
    pub step: f64,
    /// A direct step, per N x D (one f32 fma) per sequence-step.
    pub direct: f64,
}

/// The rates `measure` cached on the 2-core development machine (Intel
/// Xeon, AVX2/FMA/AVX-512) the CPU method was written on (build 3.7e-11,
/// step 8.5e-10, direct 9.4e-11, 2026-12-05, load about 3), times 1.3: the
/// wall time of whole runs of the poems over those kernel seconds there
/// (1.09-1.45; lua/divgpu/methods/cpu.lua's WALL_OVER_KERNELS). An earlier
/// DEFAULT, measured under a load average of 14, was 3-6x these. The ratios
/// choose the plan: a Gram step about 40x cheaper than a direct one at
/// D = 384; G's build worth it past about 0.4 N sequence-steps.
pub const DEFAULT: Rates = Rates { build: 4.8e-11, step: 1.1e-9, direct: 1.2e-10 };

/// A quarter of the machine's memory (from /proc/meminfo; 4 GiB where it
/// cannot be read): the most G may take.
pub fn memory_limit() -> u64 {
    let total_kib = std::fs::read_to_string("/proc/meminfo").ok().and_then(|s| {
        s.lines().find(|l| l.starts_with("MemTotal:")).and_then(|l| l.split_whitespace().nth(1)?.parse::<u64>().ok())
    });
    total_kib.map_or(4 << 30, |k| k * 1024 / 4)
}

/// Estimated seconds of a job of `steps` sequence-steps by `plan`.
pub fn estimate(r: &Rates, plan: Plan, n: usize, dim: usize, steps: u64) -> f64 {
    let (n, dim, s) = (n as f64, dim as f64, steps as f64);
    match plan {
        Plan::Gram => r.build * n * n * dim + r.step * n * s,
        Plan::Direct => r.direct * n * dim * s,
    }
}

/// The cheaper plan for a table the Gram certificate admits, and why.
pub fn choose(r: &Rates, n: usize, dim: usize, steps: u64) -> (Plan, String) {
    let g_bytes = (n as u64) * (n as u64) * 4;
    if g_bytes > memory_limit() {
        return (Plan::Direct, format!("G would take {g_bytes} bytes, over a quarter of the memory"));
    }
    let (g, d) = (estimate(r, Plan::Gram, n, dim, steps), estimate(r, Plan::Direct, n, dim, steps));
    let why = format!("estimated gram {g:.3} s, direct {d:.3} s");
    (if g <= d { Plan::Gram } else { Plan::Direct }, why)
}

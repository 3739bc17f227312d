// The epilogue of one output, shared by the decode matvecs (matvec_fused, matvec_q8a,
// matvec_rows). Not a kernel: appended to each file naming it in a
// `// #include matvec_epilogue.inc.wgsl` line. The including file declares `y` (f32,
// read_write) and the override EPI (0 store, 1 accumulate, 2 gated silu, 3 gated gelu_tanh).

fn silu(g: f32) -> f32 {
    // exp(-g) overflows to inf for g < -88: g / inf = -0, the right limit.
    return g / (1.0 + exp(-g));
}

fn gelu_tanh(g: f32) -> f32 {
    let inner = 0.7978845608028654 * (g + 0.044715 * g * g * g);
    // tanh is +-1 in f32 beyond |x| = 9.1; the clamp avoids inf/inf in exp-based tanh.
    return 0.5 * g * (1.0 + tanh(clamp(inner, -15.0, 15.0)));
}

// Writes output word o from its dot product g (gated: act(g) * up; EPI 1 adds y[o]).
fn epilogue_store(o: u32, g: f32, up: f32) {
    var val = g;
    if (EPI == 2u) {
        val = silu(g) * up;
    } else if (EPI == 3u) {
        val = gelu_tanh(g) * up;
    }
    if (EPI == 1u) {
        val += y[o];
    }
    y[o] = val;
}

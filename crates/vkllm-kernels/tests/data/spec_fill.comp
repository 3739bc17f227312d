#version 450
// Test fixture for GLSL kernels' specialization (crates/vkllm-kernels/src/glsl.rs):
// y[i] = (NEG ? -1 : 1) * (float(i * MUL + OFF) + ADD) for i < n, on WG invocations per group.
layout(local_size_x_id = 0) in;
layout(constant_id = 1) const uint MUL = 1;
layout(constant_id = 2) const int OFF = 0;
layout(constant_id = 3) const float ADD = 0.0;
layout(constant_id = 4) const bool NEG = false;
layout(push_constant) uniform Params { uint n; } p;
layout(set = 0, binding = 0) buffer Y { float y[]; };
void main() {
    uint i = gl_GlobalInvocationID.x;
    if (i < p.n) {
        float v = float(int(i * MUL) + OFF) + ADD;
        y[i] = NEG ? -v : v;
    }
}

#version 450
// matmul_cm2.glsl for _q4_k weights.
#define W_Q4_K 1
#extension GL_GOOGLE_include_directive : require
#include "matmul_cm2.glsl"

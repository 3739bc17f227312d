#version 450
// matmul_cm2.glsl for f16 weights.

#extension GL_GOOGLE_include_directive : require
#include "matmul_cm2.glsl"

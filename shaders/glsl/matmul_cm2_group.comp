#version 450
// matmul_cm2.glsl for up to three f16 weights of one X in one launch (SEGMENTS).

#extension GL_GOOGLE_include_directive : require
#define SEGMENTS 1
#include "matmul_cm2.glsl"

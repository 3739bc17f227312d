//! Compiler statistics of each pipeline (VK_KHR_pipeline_executable_properties): registers,
//! spills, shared memory, instruction counts as the driver names them. Off unless
//! tuning `pipeline_stats=1` and the device offers the extension; then every pipeline is created
//! with `CAPTURE_STATISTICS` and its statistics go to stderr, one line per executable, so a
//! kernel's occupancy can be read instead of guessed.

use std::ffi::CStr;

use ash::vk;

pub(crate) const EXTENSION: &CStr = c"VK_KHR_pipeline_executable_properties";

/// One statistic's value as text.
fn value(s: &vk::PipelineExecutableStatisticKHR) -> String {
    // SAFETY: the union member read is the one `format` names.
    unsafe {
        match s.format {
            vk::PipelineExecutableStatisticFormatKHR::BOOL32 => (s.value.b32 != 0).to_string(),
            vk::PipelineExecutableStatisticFormatKHR::INT64 => s.value.i64.to_string(),
            vk::PipelineExecutableStatisticFormatKHR::UINT64 => s.value.u64.to_string(),
            vk::PipelineExecutableStatisticFormatKHR::FLOAT64 => format!("{:.3}", s.value.f64),
            _ => "?".into(),
        }
    }
}

/// One executable's name and its statistics as (name, value) pairs.
type Executable = (String, Vec<(String, String)>);

/// The statistics of `pipeline` as `name=value` pairs per executable (empty when the driver
/// reports none). Errors are returned as text: a diagnostic must not fail pipeline creation.
pub(crate) fn collect(
    ext: &ash::khr::pipeline_executable_properties::Device,
    pipeline: vk::Pipeline,
) -> Result<Vec<Executable>, vk::Result> {
    let info = vk::PipelineInfoKHR::default().pipeline(pipeline);
    // SAFETY: `pipeline` is a valid pipeline created with CAPTURE_STATISTICS on this device.
    let execs = unsafe { ext.get_pipeline_executable_properties(&info)? };
    let mut out = Vec::new();
    for (i, e) in execs.iter().enumerate() {
        let ei = vk::PipelineExecutableInfoKHR::default()
            .pipeline(pipeline)
            .executable_index(i as u32);
        // SAFETY: as above; `i` is below the executable count just returned.
        let stats = unsafe { ext.get_pipeline_executable_statistics(&ei)? };
        let name = e
            .name_as_c_str()
            .map_or("?".into(), |c| c.to_string_lossy().into_owned());
        let pairs = stats
            .iter()
            .map(|s| {
                let n = s
                    .name_as_c_str()
                    .map_or("?".into(), |c| c.to_string_lossy().into_owned());
                (n, value(s))
            })
            .collect();
        out.push((name, pairs));
    }
    Ok(out)
}

/// Prints [`collect`]'s result for `kernel` (specialised with `overrides`) to stderr.
pub(crate) fn report(
    ext: &ash::khr::pipeline_executable_properties::Device,
    pipeline: vk::Pipeline,
    kernel: &str,
    overrides: &vkllm_kernels::Overrides,
) {
    match collect(ext, pipeline) {
        Ok(execs) => {
            for (name, pairs) in execs {
                let list: Vec<String> = pairs.iter().map(|(n, v)| format!("{n}={v}")).collect();
                eprintln!(
                    "pipeline-stats {kernel} [{overrides}] {name}: {}",
                    list.join(", ")
                );
            }
        }
        Err(r) => eprintln!("pipeline-stats {kernel}: not available ({r:?})"),
    }
}

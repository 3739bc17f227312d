//! Command pools, fences and descriptor pools of finished recordings, reset and kept for the
//! next recorder instead of destroyed: a forward records a new command buffer every time, and
//! creating and destroying these objects each time costs measurable host time per forward (see
//! docs/benchmarks.md). Tuning `recycle=0` destroys them (the reference path).

use ash::vk;

/// Most sets of objects a device keeps.
pub const MAX_SPARES: usize = 8;

/// The reusable objects of one recording: its command pool with the command buffer allocated
/// from it, its fence (signalled) and its descriptor pools (reset).
pub(crate) struct Spare {
    pub(crate) pool: vk::CommandPool,
    pub(crate) cb: vk::CommandBuffer,
    pub(crate) fence: vk::Fence,
    pub(crate) desc_pools: Vec<vk::DescriptorPool>,
}

impl Spare {
    /// # Safety
    /// No command buffer of the pool is pending and no set of the descriptor pools is in use.
    pub(crate) unsafe fn destroy(self, d: &ash::Device) {
        // SAFETY: per the caller.
        unsafe {
            d.destroy_fence(self.fence, None);
            for p in self.desc_pools {
                d.destroy_descriptor_pool(p, None);
            }
            d.destroy_command_pool(self.pool, None);
        }
    }
}

/// The device's spares.
#[derive(Default)]
pub(crate) struct Spares(std::sync::Mutex<Vec<Spare>>);

impl Spares {
    /// How many sets of objects are kept.
    pub(crate) fn len(&self) -> usize {
        self.0.lock().map_or(0, |v| v.len())
    }

    /// A kept set of objects, if any.
    pub(crate) fn take(&self) -> Option<Spare> {
        self.0.lock().ok()?.pop()
    }

    /// Resets `s` and keeps it, or destroys it when the device keeps enough (or `keep` is off:
    /// the tuning's `recycle`, or a reset fails).
    ///
    /// # Safety
    /// As [`Spare::destroy`]; the fence is signalled.
    pub(crate) unsafe fn put(&self, d: &ash::Device, s: Spare, keep: bool) {
        // SAFETY: per the caller, nothing of `s` is in use.
        let reset = keep
            && unsafe {
                d.reset_command_pool(s.pool, vk::CommandPoolResetFlags::empty())
                    .is_ok()
                    && s.desc_pools.iter().all(|&p| {
                        d.reset_descriptor_pool(p, vk::DescriptorPoolResetFlags::empty())
                            .is_ok()
                    })
            };
        let s = match (reset, self.0.lock()) {
            (true, Ok(mut v)) if v.len() < MAX_SPARES => {
                v.push(s);
                return;
            }
            _ => s,
        };
        // SAFETY: per the caller.
        unsafe { s.destroy(d) };
    }

    /// Destroys every spare (the device is idle and about to be destroyed).
    ///
    /// # Safety
    /// The device is idle.
    pub(crate) unsafe fn clear(&self, d: &ash::Device) {
        if let Ok(mut v) = self.0.lock() {
            for s in v.drain(..) {
                // SAFETY: the device is idle.
                unsafe { s.destroy(d) };
            }
        }
    }
}

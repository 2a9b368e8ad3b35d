//! Device selection: `auto | cpu | cuda[:N]`.
//!
//! `auto` prefers CUDA when a driver and a device answer and falls back to the CPU, saying
//! why; an explicit `cuda` request that cannot be met is an error, never a silent fallback.

use std::fmt;
use std::str::FromStr;
use std::sync::Arc;

use crate::KernelError;
use crate::cuda::CudaDevice;

/// What the operator asked for.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum DeviceSpec {
    #[default]
    Auto,
    Cpu,
    Cuda(usize),
}

impl FromStr for DeviceSpec {
    type Err = KernelError;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let invalid = || KernelError::InvalidDeviceSpec {
            given: s.to_string(),
        };
        match s.trim() {
            "auto" => Ok(DeviceSpec::Auto),
            "cpu" => Ok(DeviceSpec::Cpu),
            "cuda" => Ok(DeviceSpec::Cuda(0)),
            other => {
                let ordinal = other.strip_prefix("cuda:").ok_or_else(invalid)?;
                ordinal.parse().map(DeviceSpec::Cuda).map_err(|_| invalid())
            }
        }
    }
}

impl fmt::Display for DeviceSpec {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            DeviceSpec::Auto => f.write_str("auto"),
            DeviceSpec::Cpu => f.write_str("cpu"),
            DeviceSpec::Cuda(n) => write!(f, "cuda:{n}"),
        }
    }
}

/// A device models can be placed on. Cheap to clone: a CUDA device is shared.
#[derive(Clone)]
pub enum Device {
    Cpu,
    Cuda(Arc<CudaDevice>),
}

impl Device {
    /// The label used in logs, metrics and the protocol: `cpu` or `cuda:N`.
    pub fn label(&self) -> String {
        match self {
            Device::Cpu => "cpu".to_string(),
            Device::Cuda(d) => format!("cuda:{}", d.ordinal()),
        }
    }

    pub fn is_cuda(&self) -> bool {
        matches!(self, Device::Cuda(_))
    }
}

impl fmt::Debug for Device {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.label())
    }
}

/// The device chosen for a [`DeviceSpec`], with the reason, for the start-up log.
#[derive(Debug)]
pub struct Selection {
    pub device: Device,
    pub reason: String,
}

impl Selection {
    pub fn select(spec: DeviceSpec) -> Result<Selection, KernelError> {
        match spec {
            DeviceSpec::Cpu => Ok(Selection {
                device: Device::Cpu,
                reason: "cpu requested".into(),
            }),
            DeviceSpec::Cuda(ordinal) => {
                let dev = CudaDevice::open(ordinal)?;
                let reason = format!("cuda:{ordinal} requested: {}", dev.describe());
                Ok(Selection {
                    device: Device::Cuda(dev),
                    reason,
                })
            }
            DeviceSpec::Auto => match CudaDevice::open(0) {
                Ok(dev) => {
                    let reason = format!("auto: found {}", dev.describe());
                    Ok(Selection {
                        device: Device::Cuda(dev),
                        reason,
                    })
                }
                Err(e) => Ok(Selection {
                    device: Device::Cpu,
                    reason: format!("auto: using the CPU because {e}"),
                }),
            },
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_every_spelling() {
        assert_eq!("auto".parse::<DeviceSpec>().unwrap(), DeviceSpec::Auto);
        assert_eq!("cpu".parse::<DeviceSpec>().unwrap(), DeviceSpec::Cpu);
        assert_eq!("cuda".parse::<DeviceSpec>().unwrap(), DeviceSpec::Cuda(0));
        assert_eq!("cuda:3".parse::<DeviceSpec>().unwrap(), DeviceSpec::Cuda(3));
        for bad in ["gpu", "cuda:", "cuda:x", "cuda:-1", "CPU0", ""] {
            let err = bad.parse::<DeviceSpec>().unwrap_err();
            assert!(
                err.to_string().contains("expected auto, cpu"),
                "{bad}: {err}"
            );
        }
    }

    #[test]
    fn display_round_trips() {
        for spec in [DeviceSpec::Auto, DeviceSpec::Cpu, DeviceSpec::Cuda(2)] {
            assert_eq!(spec.to_string().parse::<DeviceSpec>().unwrap(), spec);
        }
    }

    #[test]
    fn auto_never_fails_and_says_why() {
        let sel = Selection::select(DeviceSpec::Auto).unwrap();
        assert!(sel.reason.starts_with("auto:"), "{}", sel.reason);
    }

    #[test]
    fn explicit_cuda_is_an_error_when_absent_never_a_fallback() {
        // On a machine with a GPU, ordinal 999 does not exist either.
        let err = Selection::select(DeviceSpec::Cuda(999)).unwrap_err();
        assert!(matches!(err, KernelError::CudaUnavailable(_)), "{err}");
    }
}

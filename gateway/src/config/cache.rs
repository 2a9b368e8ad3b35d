//! `[cache]`: the response cache's size and expiry, server-wide ([`crate::cache`]); which
//! models use it is each model's `cache` setting.

use std::time::Duration;

use serde::{Deserialize, Serialize};

use super::ConfigError;

#[derive(Clone, Debug, Default, Deserialize, Serialize, PartialEq)]
#[serde(default, deny_unknown_fields)]
pub struct CacheConfig {
    /// Bytes the cached answers may take in all, keys and values counted; 0 turns the cache
    /// off. Signed so that a negative size is refused by name rather than as a type error.
    pub max_bytes: i64,
    /// Seconds an answer stays after it is stored; none: until evicted.
    pub ttl_s: Option<f64>,
}

impl CacheConfig {
    pub fn enabled(&self) -> bool {
        self.max_bytes > 0
    }

    /// The byte bound, once validated.
    pub fn capacity(&self) -> u64 {
        self.max_bytes.max(0) as u64
    }

    pub fn ttl(&self) -> Option<Duration> {
        self.ttl_s.map(Duration::from_secs_f64)
    }

    /// Refuses a size below 0 or above the memory this process may use, and an expiry
    /// that is not a positive number of seconds.
    pub fn validate(&self, memory_limit: Option<u64>) -> Result<(), ConfigError> {
        if self.max_bytes < 0 {
            return Err(ConfigError::Invalid(format!(
                "cache.max_bytes must be 0 (off) or a size in bytes, got {}",
                self.max_bytes
            )));
        }
        if let Some(limit) = memory_limit.filter(|&l| self.capacity() > l) {
            return Err(ConfigError::Invalid(format!(
                "cache.max_bytes {} is more than the {limit} bytes of memory this process may \
                 use (its cgroup's memory.max, or the machine's memory); set it well below that",
                self.max_bytes
            )));
        }
        match self.ttl_s {
            Some(t) if !(t.is_finite() && t > 0.0 && t <= 365.0 * 86_400.0) => {
                Err(ConfigError::Invalid(format!(
                    "cache.ttl_s must be a positive number of seconds (at most a year), got {t}; \
                     leave it out to keep answers until they are evicted"
                )))
            }
            _ => Ok(()),
        }
    }
}

/// The memory this process may use: its cgroup's `memory.max` where one is set, else the
/// machine's memory; `None` where neither can be read.
pub fn memory_limit() -> Option<u64> {
    let cgroup = std::fs::read_to_string("/sys/fs/cgroup/memory.max")
        .ok()
        .and_then(|s| s.trim().parse::<u64>().ok());
    let machine = std::fs::read_to_string("/proc/meminfo").ok().and_then(|s| {
        let line = s.lines().find(|l| l.starts_with("MemTotal:"))?;
        let kib: u64 = line.split_whitespace().nth(1)?.parse().ok()?;
        Some(kib * 1024)
    });
    cgroup.into_iter().chain(machine).min()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn config(max_bytes: i64, ttl_s: Option<f64>) -> CacheConfig {
        CacheConfig { max_bytes, ttl_s }
    }

    #[test]
    fn refuses_negative_oversized_and_zero_ttl_with_the_key_named() {
        let err = |c: CacheConfig| c.validate(Some(1 << 30)).unwrap_err().to_string();
        assert!(err(config(-1, None)).contains("cache.max_bytes must be 0"));
        assert!(err(config(2 << 30, None)).contains("more than the 1073741824 bytes"));
        assert!(err(config(1 << 20, Some(0.0))).contains("cache.ttl_s must be a positive"));
        assert!(err(config(1 << 20, Some(f64::NAN))).contains("cache.ttl_s"));
        assert!(config(0, None).validate(Some(1 << 30)).is_ok());
        assert!(config(1 << 20, Some(30.0)).validate(None).is_ok());
    }

    #[test]
    fn this_machine_has_a_memory_limit() {
        assert!(memory_limit().is_some_and(|m| m > 1 << 20));
    }
}

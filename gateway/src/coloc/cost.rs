//! What the device costs, and who it is charged to.
//!
//! Every second of the device costs `device_hour_usd / 3600`. The share lent to training
//! (the allowance in force while a trainer is active) is charged to training; the rest to
//! inference. Inference cost is split among models by the requests each completed in the
//! same tick (a tick without requests carries its cost to the next split), so
//! `cost per inference = a model's inference cost / its requests` — and every device-second
//! training harvests is one inference no longer pays for.

use std::collections::BTreeMap;

#[derive(Clone, Debug, Default)]
pub struct CostLedger {
    pub price_per_second: f64,
    pub inference_usd: f64,
    pub training_usd: f64,
    /// Device-seconds lent to training.
    pub harvested_seconds: f64,
    /// Inference cost not yet split among models.
    unallocated_usd: f64,
    /// Per model: (cost charged, requests completed).
    pub models: BTreeMap<String, (f64, u64)>,
}

impl CostLedger {
    pub fn new(device_hour_usd: f64) -> CostLedger {
        CostLedger {
            price_per_second: device_hour_usd.max(0.0) / 3600.0,
            ..Default::default()
        }
    }

    /// Charges `seconds` of device time, `lent` of it to training, and splits the inference
    /// part by `completed` requests per model in that time.
    pub fn charge(&mut self, seconds: f64, lent: f64, completed: &BTreeMap<String, u64>) {
        let lent = lent.clamp(0.0, 1.0);
        let cost = seconds * self.price_per_second;
        self.training_usd += cost * lent;
        self.harvested_seconds += seconds * lent;
        let inference = cost * (1.0 - lent);
        self.inference_usd += inference;
        self.unallocated_usd += inference;
        let total: u64 = completed.values().sum();
        if total == 0 {
            return;
        }
        for (model, n) in completed {
            let e = self.models.entry(model.clone()).or_default();
            e.0 += self.unallocated_usd * *n as f64 / total as f64;
            e.1 += n;
        }
        self.unallocated_usd = 0.0;
    }

    pub fn cost_per_inference(&self, model: &str) -> Option<f64> {
        self.models
            .get(model)
            .filter(|(_, n)| *n > 0)
            .map(|(c, n)| c / *n as f64)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lending_lowers_the_cost_per_inference() {
        let reqs = BTreeMap::from([("m".to_string(), 100u64)]);
        let mut alone = CostLedger::new(3.6); // $0.001 per second
        let mut shared = CostLedger::new(3.6);
        for _ in 0..10 {
            alone.charge(1.0, 0.0, &reqs);
            shared.charge(1.0, 0.6, &reqs);
        }
        assert!((alone.cost_per_inference("m").unwrap() - 1e-5).abs() < 1e-12);
        assert!((shared.cost_per_inference("m").unwrap() - 4e-6).abs() < 1e-12);
        assert!((shared.training_usd - 0.006).abs() < 1e-12);
        assert!((shared.harvested_seconds - 6.0).abs() < 1e-9);
        assert!((shared.training_usd + shared.inference_usd - alone.inference_usd).abs() < 1e-12);
    }

    #[test]
    fn idle_cost_is_carried_to_the_next_requests() {
        let mut l = CostLedger::new(3.6);
        l.charge(1.0, 0.0, &BTreeMap::new());
        l.charge(
            1.0,
            0.0,
            &BTreeMap::from([("a".to_string(), 1), ("b".to_string(), 3)]),
        );
        assert!((l.models["a"].0 - 0.0005).abs() < 1e-12);
        assert!((l.models["b"].0 - 0.0015).abs() < 1e-12);
    }
}

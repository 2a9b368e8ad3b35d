//! Training data: the UCI hand-written digits (bundled, see data/README.md), and a synthetic
//! workload of any size for benchmarks.

use std::io::Read;

use models::rng::SplitMix64;

/// Labelled rows, inputs row-major.
#[derive(Clone, Debug)]
pub struct Dataset {
    pub inputs: Vec<f32>,
    pub labels: Vec<u32>,
    pub width: usize,
    pub classes: usize,
}

/// Pixel values run 0..16; training sees them scaled to 0..1.
pub const DIGITS_SCALE: f32 = 16.0;

static DIGITS_CSV_GZ: &[u8] = include_bytes!("../data/digits.csv.gz");

impl Dataset {
    pub fn len(&self) -> usize {
        self.labels.len()
    }

    pub fn is_empty(&self) -> bool {
        self.labels.is_empty()
    }

    /// The 1,797 UCI digits: 64 pixels each, scaled to 0..1, labels 0..9.
    pub fn digits() -> Result<Dataset, String> {
        let mut text = String::new();
        flate2::read::GzDecoder::new(DIGITS_CSV_GZ)
            .read_to_string(&mut text)
            .map_err(|e| format!("digits.csv.gz: {e}"))?;
        let mut inputs = Vec::with_capacity(1797 * 64);
        let mut labels = Vec::with_capacity(1797);
        for (n, line) in text
            .lines()
            .enumerate()
            .filter(|(_, l)| !l.trim().is_empty())
        {
            let values: Vec<f32> = line
                .split(',')
                .map(|v| v.trim().parse::<f32>())
                .collect::<Result<_, _>>()
                .map_err(|e| format!("digits.csv line {}: {e}", n + 1))?;
            if values.len() != 65 {
                return Err(format!(
                    "digits.csv line {}: {} values, expected 65",
                    n + 1,
                    values.len()
                ));
            }
            inputs.extend(values[..64].iter().map(|v| v / DIGITS_SCALE));
            labels.push(values[64] as u32);
        }
        Ok(Dataset {
            inputs,
            labels,
            width: 64,
            classes: 10,
        })
    }

    /// A seeded shuffle split into (train, test) with `test_share` of the rows held out.
    pub fn split(&self, test_share: f64, seed: u64) -> (Dataset, Dataset) {
        let mut order: Vec<usize> = (0..self.len()).collect();
        SplitMix64::new(seed).shuffle(&mut order);
        let test_n = (self.len() as f64 * test_share).round() as usize;
        let pick = |idx: &[usize]| Dataset {
            inputs: idx
                .iter()
                .flat_map(|&i| {
                    self.inputs[i * self.width..(i + 1) * self.width]
                        .iter()
                        .copied()
                })
                .collect(),
            labels: idx.iter().map(|&i| self.labels[i]).collect(),
            width: self.width,
            classes: self.classes,
        };
        (pick(&order[test_n..]), pick(&order[..test_n]))
    }

    /// Rows `idx` as one batch.
    pub fn batch(&self, idx: &[usize]) -> (Vec<f32>, Vec<u32>) {
        let mut x = Vec::with_capacity(idx.len() * self.width);
        let mut y = Vec::with_capacity(idx.len());
        for &i in idx {
            x.extend_from_slice(&self.inputs[i * self.width..(i + 1) * self.width]);
            y.push(self.labels[i]);
        }
        (x, y)
    }
}

/// An endless stream of labelled rows for benchmarks: normal inputs, labels from a fixed
/// random linear "teacher", so the task is learnable and the loss falls.
pub struct Synthetic {
    pub width: usize,
    pub classes: usize,
    teacher: Vec<f32>,
    rng: SplitMix64,
}

impl Synthetic {
    pub fn new(width: usize, classes: usize, seed: u64) -> Synthetic {
        let mut rng = SplitMix64::new(seed);
        let teacher = (0..width * classes).map(|_| rng.normal()).collect();
        Synthetic {
            width,
            classes,
            teacher,
            rng,
        }
    }

    pub fn batch(&mut self, rows: usize) -> (Vec<f32>, Vec<u32>) {
        let x: Vec<f32> = (0..rows * self.width).map(|_| self.rng.normal()).collect();
        let y = x
            .chunks_exact(self.width)
            .map(|row| {
                (0..self.classes)
                    .map(|c| {
                        let w = &self.teacher[c * self.width..(c + 1) * self.width];
                        row.iter().zip(w).map(|(a, b)| a * b).sum::<f32>()
                    })
                    .enumerate()
                    .max_by(|a, b| a.1.total_cmp(&b.1))
                    .map_or(0, |(c, _)| c as u32)
            })
            .collect();
        (x, y)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_bundled_digits_load_whole() {
        let d = Dataset::digits().unwrap();
        assert_eq!((d.len(), d.width, d.classes), (1797, 64, 10));
        assert!(d.inputs.iter().all(|v| (0.0..=1.0).contains(v)));
        let mut counts = [0; 10];
        for l in &d.labels {
            counts[*l as usize] += 1;
        }
        assert!(counts.iter().all(|c| (170..=190).contains(c)), "{counts:?}");
        let (train, test) = d.split(0.2, 1);
        assert_eq!((train.len(), test.len()), (1438, 359));
    }
}

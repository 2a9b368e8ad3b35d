//! Numbers, in the pass that validates them: the digits read eight at a time into one
//! mantissa, and the value made exactly (or within one unit in the last place) whenever the
//! fast path allows, by the standard library's parser otherwise.

use super::{Error, Number, Reader};

impl Reader<'_> {
    /// Reads the digits at the cursor into `mantissa` while it has room for them.
    /// Returns how many digits there were and whether any did not fit.
    #[inline(always)]
    fn digits(&mut self, mantissa: &mut u64) -> (usize, bool) {
        let start = self.pos;
        // Eight at a time while eight digits follow and the mantissa has room for them.
        // (Taking the digits a word starts with too, to leave no byte loop for the last
        // few, measured slower: the usual 16–17 digits then end on a branch that goes
        // either way.)
        while *mantissa < 100_000_000_000 {
            let Some(chunk) = self.input[self.pos..].first_chunk::<8>() else {
                break;
            };
            let word = u64::from_le_bytes(*chunk);
            if leading_digits(word) < 8 {
                break;
            }
            *mantissa = *mantissa * 100_000_000 + eight_digits(word);
            self.pos += 8;
        }
        // The rest one at a time, checked.
        let mut truncated = false;
        while let Some(b @ b'0'..=b'9') = self.peek() {
            // Below 10^18 one more digit always fits; past it the slow path reads the text.
            if *mantissa < 1_000_000_000_000_000_000 && !truncated {
                *mantissa = *mantissa * 10 + (b - b'0') as u64;
            } else {
                truncated = true;
            }
            self.pos += 1;
        }
        (self.pos - start, truncated)
    }

    // Inlined into its callers, as is `JsonData::push_number` (and not `next_item`): what
    // `cargo bench -p gateway --bench json` measured fastest.
    #[inline(always)]
    pub(super) fn parse_number(&mut self) -> Result<Number, Error> {
        let start = self.pos;
        let negative = self.peek() == Some(b'-');
        if negative {
            self.pos += 1;
        }
        let mut mantissa = 0u64;
        let truncated = match self.peek() {
            Some(b'0') => {
                self.pos += 1;
                false
            }
            Some(b'1'..=b'9') => self.digits(&mut mantissa).1,
            _ => return Err(self.error("invalid number")),
        };
        let mut fraction_digits = 0;
        let mut fraction_truncated = false;
        if self.peek() == Some(b'.') {
            self.pos += 1;
            (fraction_digits, fraction_truncated) = self.digits(&mut mantissa);
            if fraction_digits == 0 {
                return Err(self.error("invalid number"));
            }
        }
        let mut exponent: i64 = 0;
        let has_exponent = matches!(self.peek(), Some(b'e' | b'E'));
        if has_exponent {
            self.pos += 1;
            let exponent_negative = match self.peek() {
                Some(b'-') => {
                    self.pos += 1;
                    true
                }
                Some(b'+') => {
                    self.pos += 1;
                    false
                }
                _ => false,
            };
            let mut exponent_digits = 0;
            while let Some(b @ b'0'..=b'9') = self.peek() {
                // Saturates far beyond any f64; the slow path gives such a number its value.
                exponent = (exponent * 10 + (b - b'0') as i64).min(1 << 32);
                exponent_digits += 1;
                self.pos += 1;
            }
            if exponent_digits == 0 {
                return Err(self.error("invalid number"));
            }
            if exponent_negative {
                exponent = -exponent;
            }
        }
        let text = &self.input[start..self.pos];
        if fraction_digits == 0 && !has_exponent {
            return if truncated {
                self.parse_integer_slowly(text, negative)
            } else {
                Ok(integer(mantissa, negative))
            };
        }
        let power = exponent - fraction_digits as i64;
        let value = match exact_or_close(mantissa, power) {
            Some(v) if !truncated && !fraction_truncated => v,
            _ => return self.parse_float_slowly(text),
        };
        Ok(Number::F64(if negative { -value } else { value }))
    }

    /// An integer of more than 19 digits: u64 or i64 if it fits, else f64, as serde_json.
    fn parse_integer_slowly(&self, text: &[u8], negative: bool) -> Result<Number, Error> {
        // The scan accepted only ASCII digits and a sign, so this cannot fail; if it did,
        // the request would be refused, not the server stopped.
        let text = std::str::from_utf8(text).map_err(|_| self.error("invalid number"))?;
        if !negative && let Ok(v) = text.parse::<u64>() {
            return Ok(Number::U64(v));
        }
        if negative && let Ok(v) = text.parse::<i64>() {
            return Ok(Number::I64(v));
        }
        self.parse_float_slowly(text.as_bytes())
    }

    fn parse_float_slowly(&self, text: &[u8]) -> Result<Number, Error> {
        // JSON's number grammar is a subset of what `f64::from_str` reads, and it rounds
        // correctly whatever the number of digits.
        let text = std::str::from_utf8(text).map_err(|_| self.error("invalid number"))?;
        match text.parse::<f64>() {
            Ok(v) if v.is_finite() => Ok(Number::F64(v)),
            _ => Err(self.error("number out of range")),
        }
    }
}

fn integer(mantissa: u64, negative: bool) -> Number {
    if !negative {
        return Number::U64(mantissa);
    }
    // As serde_json: -0 is a float, and a magnitude past i64 becomes one.
    let value = (mantissa as i64).wrapping_neg();
    if value < 0 {
        Number::I64(value)
    } else {
        Number::F64(-(mantissa as f64))
    }
}

/// `mantissa × 10^power` when one rounding gives it: exactly (Clinger's fast path: both
/// factors are exact f64s) for mantissas up to 2^53, within one unit in the last place
/// for larger ones. `None` when the power is beyond what f64 holds exactly.
fn exact_or_close(mantissa: u64, power: i64) -> Option<f64> {
    const POWERS: [f64; 23] = [
        1e0, 1e1, 1e2, 1e3, 1e4, 1e5, 1e6, 1e7, 1e8, 1e9, 1e10, 1e11, 1e12, 1e13, 1e14, 1e15, 1e16,
        1e17, 1e18, 1e19, 1e20, 1e21, 1e22,
    ];
    if mantissa == 0 {
        return Some(0.0);
    }
    let scale = *POWERS.get(power.unsigned_abs() as usize)?;
    let m = mantissa as f64;
    Some(if power >= 0 { m * scale } else { m / scale })
}

const ASCII_ZEROS: u64 = 0x3030_3030_3030_3030;

/// How many of the eight bytes of `word` (the first in the lowest byte) are ASCII digits
/// before the first that is not.
#[inline(always)]
pub(super) fn leading_digits(word: u64) -> usize {
    const ONES: u64 = 0x0101_0101_0101_0101;
    // A byte is not a digit when it has its top bit, when taking '0' from it borrows, or
    // when adding 0x7f - '9' to it reaches the top bit. Borrows and carries move only
    // towards later bytes, so the first flagged byte is the first non-digit.
    let below = word.wrapping_sub(ONES * b'0' as u64);
    let above = word.wrapping_add(ONES * (0x7f - b'9') as u64);
    let flagged = (word | below | above) & (ONES * 0x80);
    (flagged.trailing_zeros() / 8) as usize
}

/// The value of eight ASCII digits, the first in the lowest byte (three multiplies: pairs,
/// then quads, then the whole).
#[inline(always)]
pub(super) fn eight_digits(word: u64) -> u64 {
    // The products are meant to wrap: only the bits that land in the upper half count.
    const MASK: u64 = 0x0000_00FF_0000_00FF;
    let mut v = word - ASCII_ZEROS;
    v = v * 10 + (v >> 8);
    let low = (v & MASK).wrapping_mul(100 + (1_000_000 << 32));
    let high = ((v >> 16) & MASK).wrapping_mul(1 + (10_000 << 32));
    low.wrapping_add(high) >> 32
}

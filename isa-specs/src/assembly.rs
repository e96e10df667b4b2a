//! Assembly files: bundles of generated-assembler instructions plus directives
//! for I/O tensors and constant data (used by `tessera asm` and `tessera disasm`).
//!
//! ```text
//! # comment (also `//`)
//! .input  x  sram @0x0   f32 [4, 8]
//! .output y  sram @0x100 f32 [4, 8]
//! .data      sram @0x200 f32 1.0 2.0 -3.5
//! mma acc0, @0x0, @0x40 || vexp v1, v2
//! {}
//! ```

use crate::Machine;
use crate::model::DType;
use crate::program::{DataSegment, Program, TensorDesc};
use crate::target::{self, Isa, asm::AsmError};

/// Assembles a whole file into a program for `m`.
pub fn assemble(
    isa: &dyn Isa,
    m: &Machine,
    name: &str,
    text: &str,
) -> Result<Program, Vec<AsmError>> {
    let mut program = Program::new(m);
    let mut errors = Vec::new();
    for (i, raw) in text.lines().enumerate() {
        let place = format!("{name}:{}", i + 1);
        let line = strip_comment(raw).trim();
        if line.is_empty() {
            continue;
        }
        let result = if let Some(directive) = line.strip_prefix('.') {
            directive_line(m, &mut program, directive)
        } else {
            target::parse_bundle(isa, m, line)
                .and_then(|b| {
                    target::encode_bundle(isa, m, &b).map_err(|e| AsmError(e.to_string()))
                })
                .map(|word| program.code.extend_from_slice(&word))
        };
        if let Err(e) = result {
            errors.push(e.at(&place));
        }
    }
    if errors.is_empty() {
        Ok(program)
    } else {
        Err(errors)
    }
}

fn strip_comment(line: &str) -> &str {
    let cut = [line.find('#'), line.find("//")]
        .into_iter()
        .flatten()
        .min()
        .unwrap_or(line.len());
    &line[..cut]
}

fn memory(m: &Machine, name: &str) -> Result<String, AsmError> {
    m.memories
        .iter()
        .find(|x| x.name == name)
        .map(|x| x.name.clone())
        .ok_or_else(|| {
            AsmError(format!(
                "unknown memory `{name}` (memories: {})",
                m.memories
                    .iter()
                    .map(|x| x.name.as_str())
                    .collect::<Vec<_>>()
                    .join(", ")
            ))
        })
}

fn dtype(name: &str) -> Result<DType, AsmError> {
    DType::from_name(name).ok_or_else(|| AsmError(format!("unknown element type `{name}`")))
}

fn directive_line(m: &Machine, p: &mut Program, line: &str) -> Result<(), AsmError> {
    let mut words = line.split_whitespace();
    let kind = words.next().unwrap_or("");
    let rest: Vec<&str> = words.collect();
    match kind {
        "input" | "output" => {
            let [name, mem, addr, dt, shape @ ..] = rest.as_slice() else {
                return Err(AsmError(format!(
                    ".{kind} takes NAME MEMORY @ADDR DTYPE [d0, d1, ...]"
                )));
            };
            // An optional trailing `columns SKIP CHUNK STRIDE` (stored
            // transposed, in chunks: `program::Columns`), after an optional
            // `batch ROWS STRIDE` (rows per batch, elements between
            // batches), after an optional `pitch N` (elements between rows).
            let number = |n: &str, what: &str| {
                n.parse::<u64>()
                    .map_err(|_| AsmError(format!("`{n}` is not {what}")))
            };
            let (shape, columns) = match shape {
                [rest @ .., kw, s, c, t] if *kw == "columns" => (
                    rest,
                    Some(crate::program::Columns {
                        skip: number(s, "a number of columns")?,
                        chunk: number(c, "a chunk length")?,
                        stride: number(t, "a chunk stride")?,
                    }),
                ),
                _ => (shape, None),
            };
            let (shape, batch) = match shape {
                [rest @ .., kw, r, b] if *kw == "batch" => (
                    rest,
                    Some((number(r, "a number of rows")?, number(b, "a batch stride")?)),
                ),
                _ => (shape, None),
            };
            let (shape, pitch) = match shape {
                [rest @ .., kw, n] if *kw == "pitch" => (rest, number(n, "a row pitch")?),
                _ => (shape, 0),
            };
            let shape_text = shape.join(" ");
            let dims = shape_text
                .trim()
                .strip_prefix('[')
                .and_then(|s| s.strip_suffix(']'))
                .ok_or_else(|| {
                    AsmError(format!("expected a shape `[d0, d1]`, found `{shape_text}`"))
                })?;
            let shape = dims
                .split(',')
                .map(str::trim)
                .filter(|d| !d.is_empty())
                .map(|d| {
                    d.parse::<u64>()
                        .map_err(|_| AsmError(format!("`{d}` is not a dimension")))
                })
                .collect::<Result<Vec<_>, _>>()?;
            let desc = TensorDesc {
                name: (*name).to_owned(),
                dtype: dtype(dt)?,
                shape,
                memory: memory(m, mem)?,
                addr: target::asm::addr(addr)?,
                pitch,
                batch,
                columns,
            };
            if let Some(cs) = columns {
                if desc.shape.len() < 2 || cs.chunk == 0 || cs.skip >= cs.chunk {
                    return Err(AsmError(format!(
                        "columns {} {} {}: a tensor stored transposed needs two dimensions, a chunk of at least one column, and fewer empty columns than a chunk",
                        cs.skip, cs.chunk, cs.stride
                    )));
                }
                if cs.stride < cs.chunk || (desc.rows() > 1 && desc.row_pitch() < cs.chunk) {
                    return Err(AsmError(format!(
                        "chunks of {} columns {} elements apart, rows {pitch} apart: chunks or rows overlap",
                        cs.chunk, cs.stride
                    )));
                }
            } else if pitch != 0 && pitch < desc.row_len() {
                return Err(AsmError(format!(
                    "row pitch {pitch} is shorter than a row ({} elements)",
                    desc.row_len()
                )));
            }
            if let Some((rows, stride)) = batch
                && (rows == 0 || stride < rows.saturating_mul(desc.row_pitch()))
            {
                return Err(AsmError(format!(
                    "batches of {rows} rows {stride} elements apart overlap (rows are {} elements apart)",
                    desc.row_pitch()
                )));
            }
            if kind == "input" {
                p.inputs.push(desc);
            } else {
                p.outputs.push(desc);
            }
            Ok(())
        }
        "data" => {
            let [mem, addr, dt, values @ ..] = rest.as_slice() else {
                return Err(AsmError(
                    ".data takes MEMORY @ADDR DTYPE VALUE...".to_owned(),
                ));
            };
            let dt = dtype(dt)?;
            let mut bytes = Vec::new();
            for v in values {
                let x: f64 = v
                    .parse()
                    .map_err(|_| AsmError(format!("`{v}` is not a number")))?;
                bytes.extend(element_bytes(dt, x));
            }
            p.data.push(DataSegment {
                memory: memory(m, mem)?,
                addr: target::asm::addr(addr)?,
                bytes,
            });
            Ok(())
        }
        other => Err(AsmError(format!(
            "unknown directive `.{other}` (directives: .input, .output, .data)"
        ))),
    }
}

/// The little-endian bytes of one element (rounded to nearest even, saturated into integers).
pub fn element_bytes(dt: DType, x: f64) -> Vec<u8> {
    let q = crate::dtype::quantize(dt, x);
    let n = dt.bytes() as usize;
    let raw: u64 = match dt {
        DType::I8 | DType::I16 | DType::I32 => q as i64 as u64,
        DType::U8 => q as u64,
        _ => crate::dtype::encode_real(dt, q as f32),
    };
    raw.to_le_bytes()[..n].to_vec()
}

/// The assembly text of a program: directives, then one bundle per line.
pub fn disassemble(isa: &dyn Isa, m: &Machine, p: &Program) -> Result<String, String> {
    let mut out = format!(
        "# target {} ({} words of {} bits)\n",
        p.target,
        p.code.len() / target::word_bytes(m).max(1),
        m.word_bits
    );
    let directive = |kind: &str, t: &TensorDesc| {
        let shape = t
            .shape
            .iter()
            .map(u64::to_string)
            .collect::<Vec<_>>()
            .join(", ");
        let mut pitch = if t.pitch == 0 {
            String::new()
        } else {
            format!(" pitch {}", t.pitch)
        };
        if let Some((rows, stride)) = t.batch {
            pitch.push_str(&format!(" batch {rows} {stride}"));
        }
        if let Some(cs) = t.columns {
            pitch.push_str(&format!(" columns {} {} {}", cs.skip, cs.chunk, cs.stride));
        }
        format!(
            ".{kind} {} {} @{:#x} {} [{shape}]{pitch}\n",
            t.name,
            t.memory,
            t.addr,
            t.dtype.name()
        )
    };
    for t in &p.inputs {
        out.push_str(&directive("input", t));
    }
    for t in &p.outputs {
        out.push_str(&directive("output", t));
    }
    for d in &p.data {
        // Raw bytes as u8 keep the data exact whatever element type it was written with.
        let values: Vec<String> = d.bytes.iter().map(u8::to_string).collect();
        out.push_str(&format!(
            ".data {} @{:#x} u8 {}\n",
            d.memory,
            d.addr,
            values.join(" ")
        ));
    }
    let bundles =
        target::decode_program(isa, m, &p.code).map_err(|(i, e)| format!("word {i}: {e}"))?;
    for b in &bundles {
        out.push_str(&target::print_bundle(isa, m, b));
        out.push('\n');
    }
    Ok(out)
}

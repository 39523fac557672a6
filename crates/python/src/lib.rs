//! `credit._credit`: the Python extension module behind `import credit`.
//!
//! Tables come in through the Arrow PyCapsule stream interface (`__arrow_c_stream__`: pyarrow
//! Tables and RecordBatchReaders, polars and pandas DataFrames) and go out the same way (the Python
//! side wraps them with `pyarrow.table`). Every function drives `credit_core` the way the CLI
//! does (`src/cmd/{advantages,analyze,compare}.rs`): the same ingest (window by window, in bounded
//! memory), the same plan (preset < parameters), the same methods and analyses, the same errors.
//!
//! A table is ingested from a temporary Parquet file that the Python side writes, read as the CLI
//! reads a Parquet log, so aliases, checks and messages are the CLI's.

use anyhow::{Context, Result};
use credit_core::analyses::compare::{compare, CompareChunk, CompareRows};
use credit_core::analyses::summary::{summary_part, SummaryBuilder};
use credit_core::ingest::{stream, Event, IngestOptions, IngestReport, UnitKind, Window};
use credit_core::methods::{hisr, Advantages};
use credit_core::output::{advantages_frame, InOrder};
use credit_core::plan::{Notes, Plan};
use credit_core::profile::Profile;
use credit_core::schema::ColumnMap;
use credit_core::StepBatch;
use polars::prelude::*;
use polars_arrow::array::StructArray;
use polars_arrow::ffi::{export_iterator, ArrowArrayStream, ArrowArrayStreamReader};
use pyo3::exceptions::{PyException, PyTypeError};
use pyo3::prelude::*;
use pyo3::types::PyCapsule;
use std::path::PathBuf;

pyo3::create_exception!(
    credit,
    CreditError,
    PyException,
    "A bad input, parameter or file: the message is the CLI's (file, line or row, column)."
);

// ---------------------------------------------------------------------------------------------
// Arrow in and out

/// A table from any object with `__arrow_c_stream__`. Numeric columns are not copied.
fn df_from_arrow_stream(obj: &Bound<'_, PyAny>) -> PyResult<DataFrame> {
    if !obj.hasattr("__arrow_c_stream__")? {
        return Err(PyTypeError::new_err(
            "expected a pyarrow.Table, a polars.DataFrame or another object with __arrow_c_stream__",
        ));
    }
    let capsule = obj
        .call_method0("__arrow_c_stream__")?
        .cast_into::<PyCapsule>()?;
    let ptr = capsule
        .pointer_checked(Some(c"arrow_array_stream"))?
        .as_ptr() as *mut ArrowArrayStream;
    // Move the stream out, leaving a released one so that the capsule's destructor does nothing.
    let stream = Box::new(unsafe { std::ptr::replace(ptr, ArrowArrayStream::empty()) });
    let mut reader = unsafe { ArrowArrayStreamReader::try_new(stream) }.map_err(polars_err)?;
    let fields = match reader.field().dtype() {
        ArrowDataType::Struct(fields) => fields.clone(),
        other => {
            return Err(PyTypeError::new_err(format!(
                "expected a table stream, got {other:?}"
            )))
        }
    };
    let mut chunks: Vec<Vec<ArrayRef>> = vec![Vec::new(); fields.len()];
    while let Some(batch) = unsafe { reader.next() } {
        let batch = batch.map_err(polars_err)?;
        let batch = batch
            .as_any()
            .downcast_ref::<StructArray>()
            .ok_or_else(|| PyTypeError::new_err("a stream batch is not a struct array"))?;
        for (dst, arr) in chunks.iter_mut().zip(batch.values()) {
            dst.push(arr.clone());
        }
    }
    let columns = fields
        .iter()
        .zip(chunks)
        .map(|(field, chunks)| {
            let s = if chunks.is_empty() {
                Series::new_empty(field.name.clone(), &DataType::from_arrow_field(field))
            } else {
                Series::try_from((field, chunks))
                    .map_err(|e| CreditError::new_err(format!("column `{}`: {e}", field.name)))?
            };
            Ok(s.into_column())
        })
        .collect::<PyResult<Vec<Column>>>()?;
    DataFrame::new_infer_height(columns).map_err(polars_err)
}

/// A DataFrame as an Arrow C stream (one struct array per aligned chunk).
fn df_to_stream(df: &DataFrame, compat: CompatLevel) -> ArrowArrayStream {
    let mut df = df.clone();
    df.align_chunks_par();
    let dtype = ArrowDataType::Struct(df.schema().to_arrow(compat).into_iter_values().collect());
    let field = ArrowField::new(PlSmallStr::EMPTY, dtype.clone(), false);
    let height = df.height();
    let n_chunks = if df.width() == 0 {
        usize::from(height > 0)
    } else {
        df.first_col_n_chunks()
    };
    let columns: Vec<Series> = df
        .columns()
        .iter()
        .map(|c| c.as_materialized_series().clone())
        .collect();
    let iter = (0..n_chunks).map(move |i| {
        let arrays: Vec<ArrayRef> = columns.iter().map(|s| s.to_arrow(i, compat)).collect();
        let len = arrays.first().map_or(height, |a| a.len());
        Ok(Box::new(StructArray::new(dtype.clone(), len, arrays, None)) as ArrayRef)
    });
    export_iterator(Box::new(iter), field)
}

/// A table handed to Python: `pyarrow.table(obj)` reads it through `__arrow_c_stream__`.
/// Strings go out as `large_string` (Ray Data's shuffles cannot take `string_view`).
#[pyclass(frozen, module = "credit._credit")]
struct ArrowTable {
    df: DataFrame,
}

#[pymethods]
impl ArrowTable {
    #[pyo3(signature = (requested_schema = None))]
    fn __arrow_c_stream__<'py>(
        &self,
        py: Python<'py>,
        requested_schema: Option<Bound<'py, PyAny>>,
    ) -> PyResult<Bound<'py, PyCapsule>> {
        let _ = requested_schema; // best effort, as the PyCapsule interface allows
        PyCapsule::new_with_value(
            py,
            df_to_stream(&self.df, CompatLevel::oldest()),
            c"arrow_array_stream",
        )
    }
}

fn polars_err(e: PolarsError) -> PyErr {
    CreditError::new_err(e.to_string())
}

// ---------------------------------------------------------------------------------------------
// Inputs

/// The log files to read. Tables arrive as a temporary Parquet file written by the Python side
/// (`credit._input`: pyarrow's writer keeps every Arrow type as a user's Parquet log has it, so
/// the CLI's reader and messages apply; Python renames the file `<table>` in messages).
struct Input {
    paths: Vec<PathBuf>,
}

impl Input {
    fn new(source: &Bound<'_, PyAny>) -> PyResult<Input> {
        let paths: Vec<PathBuf> = source.extract().map_err(|_| {
            PyTypeError::new_err(
                "expected a list of paths (tables go through `credit.advantages` & co.)",
            )
        })?;
        Ok(Input { paths })
    }

    /// An error as the CLI prints it (`{err:#}`).
    fn error(&self, err: anyhow::Error) -> PyErr {
        to_py(err)
    }
}

fn to_py(err: anyhow::Error) -> PyErr {
    CreditError::new_err(format!("{err:#}"))
}

/// Ingest options: `--schema` (a mapping file, or pairs) and `--lenient`, `--success-threshold`.
#[derive(Clone)]
struct Ingest {
    schema_file: Option<PathBuf>,
    columns: Vec<(String, String)>,
    lenient: bool,
    success_threshold: f64,
}

impl Ingest {
    fn options(&self) -> Result<IngestOptions> {
        let mut map = ColumnMap::default();
        if let Some(path) = &self.schema_file {
            for (source, target) in ColumnMap::read_file(path)? {
                map.origins
                    .insert(source.clone(), path.display().to_string());
                map.user.insert(source, target);
            }
        }
        for (source, target) in &self.columns {
            map.origins.remove(source);
            map.user.insert(source.clone(), target.clone());
        }
        Ok(IngestOptions::new(
            map,
            self.lenient,
            self.success_threshold,
        )?)
    }

    /// `credit_core::ingest::stream` as the CLI's `read_windows` calls it (no progress bar).
    fn windows<R: Send>(
        &self,
        input: &Input,
        unit: UnitKind,
        process: impl Fn(&Window) -> Result<R> + Sync,
        sink: impl FnMut(Event<R>) -> Result<()>,
    ) -> Result<IngestReport> {
        let options = self.options()?;
        stream(&input.paths, &options, unit, &|_| {}, process, sink).context("reading the logs")
    }
}

// ---------------------------------------------------------------------------------------------
// The plan: preset < parameters ([`Plan::new`], as the CLI's, without credit.toml)

fn profile(preset: Option<&str>) -> Result<Profile> {
    preset
        .unwrap_or("paper")
        .parse()
        .map_err(anyhow::Error::msg)
}

fn plan(
    methods: Option<&str>,
    preset: Option<&str>,
    params: &[(String, String)],
    default_methods: &str,
) -> Result<Plan> {
    Ok(Plan::new(
        profile(preset)?,
        methods.unwrap_or(default_methods),
        params,
    )?)
}

/// HISR's parameters as `--methods hisr` resolves them (for analyze's segment statistics).
fn hisr_params(preset: Option<&str>, params: &[(String, String)]) -> Result<hisr::Params> {
    Ok(Plan::hisr(profile(preset)?, params)?)
}

fn take_rows(df: &DataFrame, rows: &[usize]) -> Result<DataFrame> {
    if rows.len() == df.height() && rows.iter().enumerate().all(|(i, &r)| i == r) {
        return Ok(df.clone());
    }
    let idx: Vec<IdxSize> = rows.iter().map(|&r| r as IdxSize).collect();
    Ok(df.take(&IdxCa::from_vec("".into(), idx))?)
}

/// Every window's frame, in input order.
fn in_input_order(
    ingest: &Ingest,
    input: &Input,
    unit: UnitKind,
    make: impl Fn(&Window) -> Result<(DataFrame, Vec<String>)> + Sync,
) -> Result<(Option<DataFrame>, Notes, IngestReport)> {
    let mut in_order: InOrder<DataFrame> = InOrder::default();
    let mut parts: Vec<DataFrame> = Vec::new();
    let mut notes = Notes::default();
    let report = ingest.windows(input, unit, make, |event| {
        match event {
            Event::Window(window, (frame, window_notes)) => {
                notes.extend(window_notes);
                in_order.push(window.seq, frame);
                in_order.flush(window.watermark, |frame, rows| {
                    parts.push(take_rows(frame, rows)?);
                    Ok::<(), anyhow::Error>(())
                })?;
            }
            Event::Restart => {
                in_order.clear();
                parts.clear();
                notes = Notes::default();
            }
        }
        Ok(())
    })?;
    in_order.flush(u64::MAX, |frame, rows| {
        parts.push(take_rows(frame, rows)?);
        Ok::<(), anyhow::Error>(())
    })?;
    let mut iter = parts.into_iter();
    let whole = match iter.next() {
        None => None,
        Some(mut first) => {
            for part in iter {
                first.vstack_mut_owned(part)?;
            }
            first.rechunk_mut();
            Some(first)
        }
    };
    Ok((whole, notes, report))
}

fn text_params(params: Vec<(String, String)>) -> Vec<(String, String)> {
    params
        .into_iter()
        .map(|(k, v)| (k.trim().to_string(), v.trim().to_string()))
        .collect()
}

// ---------------------------------------------------------------------------------------------
// Functions

/// The logs as one table of canonical columns (what every method reads).
#[pyfunction]
#[pyo3(signature = (source, schema_file = None, columns = Vec::new(), lenient = false, success_threshold = 0.5))]
fn read_logs(
    py: Python<'_>,
    source: &Bound<'_, PyAny>,
    schema_file: Option<PathBuf>,
    columns: Vec<(String, String)>,
    lenient: bool,
    success_threshold: f64,
) -> PyResult<(ArrowTable, String)> {
    let input = Input::new(source)?;
    let ingest = Ingest {
        schema_file,
        columns,
        lenient,
        success_threshold,
    };
    let (frame, notes, report) = py
        .detach(|| {
            in_input_order(&ingest, &input, UnitKind::Group, |w| {
                Ok((w.batch.frame().clone(), Vec::new()))
            })
        })
        .map_err(|e| input.error(e))?;
    let mut notes = notes.into_vec();
    notes.extend(report.notes.iter().cloned());
    let meta = serde_json::json!({ "notes": notes, "report": report });
    Ok((
        ArrowTable {
            df: frame.unwrap_or_default(),
        },
        meta.to_string(),
    ))
}

/// `credit advantages`: keys then every method's columns, rows in input order; and the metadata.
#[pyfunction]
#[pyo3(signature = (source, methods = None, preset = None, params = Vec::new(), schema_file = None, columns = Vec::new(), lenient = false, success_threshold = 0.5))]
#[allow(clippy::too_many_arguments)]
fn advantages(
    py: Python<'_>,
    source: &Bound<'_, PyAny>,
    methods: Option<String>,
    preset: Option<String>,
    params: Vec<(String, String)>,
    schema_file: Option<PathBuf>,
    columns: Vec<(String, String)>,
    lenient: bool,
    success_threshold: f64,
) -> PyResult<(ArrowTable, String)> {
    let params = text_params(params);
    let plan = plan(methods.as_deref(), preset.as_deref(), &params, "all").map_err(to_py)?;
    let input = Input::new(source)?;
    let ingest = Ingest {
        schema_file,
        columns,
        lenient,
        success_threshold,
    };
    let (frame, notes, report) = py
        .detach(|| {
            in_input_order(&ingest, &input, plan.unit(), |window| {
                let results = plan.run(&window.batch)?;
                let notes = results
                    .iter()
                    .flat_map(|r| r.notes.iter().cloned())
                    .collect();
                Ok((advantages_frame(&window.batch, &results)?, notes))
            })
        })
        .map_err(|e| input.error(e))?;
    let mut notes = notes.into_vec();
    notes.extend(report.notes.iter().cloned());
    Ok((
        ArrowTable {
            df: frame.unwrap_or_default(),
        },
        plan.metadata(&notes).to_string(),
    ))
}

/// `credit analyze --format json`.
#[pyfunction]
#[pyo3(signature = (source, preset = None, params = Vec::new(), schema_file = None, columns = Vec::new(), lenient = false, success_threshold = 0.5))]
#[allow(clippy::too_many_arguments)]
fn analyze(
    py: Python<'_>,
    source: &Bound<'_, PyAny>,
    preset: Option<String>,
    params: Vec<(String, String)>,
    schema_file: Option<PathBuf>,
    columns: Vec<(String, String)>,
    lenient: bool,
    success_threshold: f64,
) -> PyResult<String> {
    let params = text_params(params);
    let hisr = hisr_params(preset.as_deref(), &params).map_err(to_py)?;
    let input = Input::new(source)?;
    let ingest = Ingest {
        schema_file,
        columns,
        lenient,
        success_threshold,
    };
    py.detach(|| -> Result<String> {
        let mut builder = SummaryBuilder::default();
        let report = ingest.windows(
            &input,
            UnitKind::Group,
            |window| Ok(summary_part(&window.batch, &hisr)),
            |event| {
                match event {
                    Event::Window(_, part) => builder.add(part),
                    Event::Restart => builder = SummaryBuilder::default(),
                }
                Ok(())
            },
        )?;
        Ok(serde_json::to_string(&builder.finish(&report))?)
    })
    .map_err(|e| input.error(e))
}

/// What `compare` keeps of each row, as a table: `_seq`, `valid`, `success`, `position`, `task`
/// (when logged), then one advantage column per method (`credit.ray.compare` gathers these).
fn compare_frame(
    batch: &StepBatch,
    seq: &[u64],
    results: &[Advantages],
    labels: &[String],
) -> Result<DataFrame> {
    let mut columns = vec![
        Column::new("_seq".into(), seq),
        Column::new("valid".into(), batch.valid()),
        Column::new(
            "success".into(),
            batch
                .traj_of_row
                .iter()
                .map(|&t| batch.trajs[t as usize].success)
                .collect::<Vec<bool>>(),
        ),
        Column::new("position".into(), &batch.position),
    ];
    if let Some(tasks) = batch.tasks() {
        columns.push(
            tasks
                .clone()
                .into_series()
                .with_name("task".into())
                .into_column(),
        );
    }
    for (label, result) in labels.iter().zip(results) {
        columns.push(Column::new(label.as_str().into(), result.advantage()));
    }
    Ok(DataFrame::new(batch.len(), columns)?)
}

/// `credit compare --format json` (`compact = false`), or the compact rows of
/// [`compare_frame`] and the metadata (`compact = true`).
#[pyfunction]
#[pyo3(signature = (source, methods = None, preset = None, params = Vec::new(), schema_file = None, columns = Vec::new(), lenient = false, success_threshold = 0.5, compact = false))]
#[allow(clippy::too_many_arguments)]
fn compare_logs(
    py: Python<'_>,
    source: &Bound<'_, PyAny>,
    methods: Option<String>,
    preset: Option<String>,
    params: Vec<(String, String)>,
    schema_file: Option<PathBuf>,
    columns: Vec<(String, String)>,
    lenient: bool,
    success_threshold: f64,
    compact: bool,
) -> PyResult<(Option<ArrowTable>, String)> {
    let params = text_params(params);
    let plan = plan(
        methods.as_deref(),
        preset.as_deref(),
        &params,
        "grpo,gigpo,proxmo",
    )
    .map_err(to_py)?;
    let input = Input::new(source)?;
    let ingest = Ingest {
        schema_file,
        columns,
        lenient,
        success_threshold,
    };
    let labels = plan.labels();
    if compact {
        let (frame, notes, report) = py
            .detach(|| {
                in_input_order(&ingest, &input, plan.unit(), |window| {
                    let results = plan.run(&window.batch)?;
                    let notes = results
                        .iter()
                        .flat_map(|r| r.notes.iter().cloned())
                        .collect();
                    Ok((
                        compare_frame(&window.batch, &window.seq, &results, &labels)?,
                        notes,
                    ))
                })
            })
            .map_err(|e| input.error(e))?;
        let mut notes = notes.into_vec();
        notes.extend(report.notes.iter().cloned());
        return Ok((
            Some(ArrowTable {
                df: frame.unwrap_or_default(),
            }),
            plan.metadata(&notes).to_string(),
        ));
    }
    // As `gather` in src/cmd/mod.rs.
    let json = py
        .detach(|| -> Result<String> {
            let mut rows = CompareRows::default();
            let mut advantages: Vec<Vec<f64>> = vec![Vec::new(); labels.len()];
            let mut in_order: InOrder<CompareChunk> = InOrder::default();
            let mut notes = Notes::default();
            let report = ingest.windows(
                &input,
                plan.unit(),
                |window| {
                    let results = plan.run(&window.batch)?;
                    let notes: Vec<String> = results
                        .iter()
                        .flat_map(|r| r.notes.iter().cloned())
                        .collect();
                    let columns = results.iter().map(|r| r.advantage().to_vec()).collect();
                    Ok((CompareChunk::of(&window.batch, columns), notes))
                },
                |event| {
                    match event {
                        Event::Window(window, (chunk, window_notes)) => {
                            notes.extend(window_notes);
                            in_order.push(window.seq, chunk);
                            in_order.flush(window.watermark, |chunk, selection| {
                                rows.append(chunk, selection, &mut advantages);
                                Ok::<(), anyhow::Error>(())
                            })?;
                        }
                        Event::Restart => {
                            rows = CompareRows::default();
                            advantages.iter_mut().for_each(Vec::clear);
                            in_order.clear();
                            notes = Notes::default();
                        }
                    }
                    Ok(())
                },
            )?;
            in_order.flush(u64::MAX, |chunk, selection| {
                rows.append(chunk, selection, &mut advantages);
                Ok::<(), anyhow::Error>(())
            })?;
            let mut notes = notes.into_vec();
            notes.extend(report.notes.iter().cloned());
            let gathered: Vec<(String, Vec<f64>)> =
                labels.iter().cloned().zip(advantages).collect();
            let mut value = serde_json::to_value(compare(&rows, &gathered))?;
            value["metadata"] = plan.metadata(&notes);
            Ok(value.to_string())
        })
        .map_err(|e| input.error(e))?;
    Ok((None, json))
}

/// The comparison of compact rows ([`compare_frame`], already in input order) gathered from
/// shards; `metadata` is the JSON text to attach.
#[pyfunction]
fn compare_rows(
    py: Python<'_>,
    table: &Bound<'_, PyAny>,
    labels: Vec<String>,
    metadata: String,
) -> PyResult<String> {
    let df = df_from_arrow_stream(table)?;
    py.detach(|| -> Result<String> {
        let bools = |name: &str| -> Result<Vec<bool>> {
            Ok(df
                .column(name)?
                .bool()?
                .downcast_iter()
                .flat_map(|a| a.iter())
                .map(|v| v.unwrap_or(false))
                .collect())
        };
        let mut rows = CompareRows::default();
        rows.valid = bools("valid")?;
        rows.success = bools("success")?;
        rows.position = df
            .column("position")?
            .cast(&DataType::UInt32)?
            .u32()?
            .into_no_null_iter()
            .collect();
        if let Ok(task) = df.column("task") {
            let task = task.cast(&DataType::String)?;
            let mut index: std::collections::HashMap<String, u32> = Default::default();
            let mut ids = Vec::with_capacity(df.height());
            for name in task.str()?.downcast_iter().flat_map(|a| a.iter()) {
                let name = name.unwrap_or("(none)");
                let id = match index.get(name) {
                    Some(&id) => id,
                    None => {
                        rows.task_names.push(name.to_string());
                        let id = (rows.task_names.len() - 1) as u32;
                        index.insert(name.to_string(), id);
                        id
                    }
                };
                ids.push(id);
            }
            rows.task = Some(ids);
        }
        let mut advantages = Vec::new();
        for label in &labels {
            let values: Vec<f64> = df
                .column(label)?
                .cast(&DataType::Float64)?
                .f64()?
                .into_no_null_iter()
                .collect();
            advantages.push((label.clone(), values));
        }
        let mut value = serde_json::to_value(compare(&rows, &advantages))?;
        value["metadata"] = serde_json::from_str(&metadata)?;
        Ok(value.to_string())
    })
    .map_err(to_py)
}

/// (unit, method labels) of a plan: `unit` is `group` when every method is group-local, else
/// `iteration` (ProxMO, MGR, SPA, HISR, EMPG read the whole training batch).
#[pyfunction]
#[pyo3(signature = (methods = None, preset = None, params = Vec::new(), default_methods = "all"))]
fn plan_info(
    methods: Option<String>,
    preset: Option<String>,
    params: Vec<(String, String)>,
    default_methods: &str,
) -> PyResult<(String, Vec<String>)> {
    let params = text_params(params);
    let plan = plan(
        methods.as_deref(),
        preset.as_deref(),
        &params,
        default_methods,
    )
    .map_err(to_py)?;
    let unit = match plan.unit() {
        UnitKind::Group => "group",
        _ => "iteration",
    };
    Ok((unit.to_string(), plan.labels()))
}

/// The log column names ingest accepts for a canonical field (the name itself first).
#[pyfunction]
fn aliases(field: &str) -> PyResult<Vec<String>> {
    let f = credit_core::schema::field(field)
        .ok_or_else(|| CreditError::new_err(format!("unknown field `{field}`")))?;
    let mut out = vec![f.name.to_string()];
    out.extend(f.aliases().filter(|a| *a != f.name).map(str::to_string));
    Ok(out)
}

#[pymodule]
fn _credit(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add("CreditError", m.py().get_type::<CreditError>())?;
    m.add_class::<ArrowTable>()?;
    m.add_function(wrap_pyfunction!(read_logs, m)?)?;
    m.add_function(wrap_pyfunction!(advantages, m)?)?;
    m.add_function(wrap_pyfunction!(analyze, m)?)?;
    m.add_function(wrap_pyfunction!(compare_logs, m)?)?;
    m.add_function(wrap_pyfunction!(compare_rows, m)?)?;
    m.add_function(wrap_pyfunction!(plan_info, m)?)?;
    m.add_function(wrap_pyfunction!(aliases, m)?)?;
    m.add("__version__", env!("CARGO_PKG_VERSION"))?;
    Ok(())
}

//! Compute pipelines (with push constants and specialization constants) and
//! bind groups (one descriptor set naming the buffers a dispatch reads and
//! writes).

use std::sync::Arc;

use ash::vk;

use super::buffer::Buffer;
use super::device::Device;
use super::spirv::{reflect, Interface, Reflection};
use super::float_controls::{self, Denormals};
use crate::error::{vk_err, Error, Result};

pub struct Pipeline {
    pub device: Arc<Device>,
    pub name: String,
    pub reflection: Reflection,
    module: vk::ShaderModule,
    set_layout: vk::DescriptorSetLayout,
    pub layout: vk::PipelineLayout,
    pub raw: vk::Pipeline,
}

impl Pipeline {
    /// `specialization`: (constant_id, u32 value) pairs. `interface`: what a
    /// kernel's descriptor says of the shader (its bindings and push fields
    /// by name, in order); a module that declares anything else is refused
    /// here, before Vulkan sees it.
    pub fn new(
        device: &Arc<Device>,
        name: &str,
        spirv: &[u32],
        specialization: &[(u32, u32)],
        interface: Option<&Interface>,
    ) -> Result<Arc<Pipeline>> {
        device.check_alive()?;
        let reflection = reflect(spirv).map_err(|e| Error::Shader(format!("shader '{name}': {e}")))?;
        if let Some(d) = interface {
            reflection.check(d).map_err(|e| Error::Usage(format!("kernel '{name}': {e}")))?;
        }
        let limit = device.info.max_push_constants_size;
        if reflection.push_constant_size > limit {
            return Err(Error::Shader(format!(
                "shader '{name}': push constants of {} bytes exceed the device limit of {limit}",
                reflection.push_constant_size
            )));
        }
        let patched = with_denormal_mode(device, name, spirv)?;
        let module_info = vk::ShaderModuleCreateInfo::default().code(patched.as_deref().unwrap_or(spirv));
        let module = unsafe { device.raw.create_shader_module(&module_info, None) }
            .map_err(vk_err("vkCreateShaderModule"))?;
        // From here on, `pipeline` owns what was created, so an early return
        // destroys it in Drop.
        let mut pipeline = Pipeline {
            device: device.clone(),
            name: name.to_string(),
            reflection,
            module,
            set_layout: vk::DescriptorSetLayout::null(),
            layout: vk::PipelineLayout::null(),
            raw: vk::Pipeline::null(),
        };
        pipeline.create_layouts()?;
        pipeline.create_compute(specialization)?;
        Ok(Arc::new(pipeline))
    }
}

impl Pipeline {
    /// The descriptor set layout of the reflected bindings (storage buffers)
    /// and the pipeline layout with the push-constant range.
    fn create_layouts(&mut self) -> Result<()> {
        let device = &self.device;
        let layout_bindings: Vec<vk::DescriptorSetLayoutBinding> = self
            .reflection
            .bindings
            .iter()
            .map(|&b| {
                vk::DescriptorSetLayoutBinding::default()
                    .binding(b)
                    .descriptor_type(vk::DescriptorType::STORAGE_BUFFER)
                    .descriptor_count(1)
                    .stage_flags(vk::ShaderStageFlags::COMPUTE)
            })
            .collect();
        let set_info = vk::DescriptorSetLayoutCreateInfo::default().bindings(&layout_bindings);
        self.set_layout = unsafe { device.raw.create_descriptor_set_layout(&set_info, None) }
            .map_err(vk_err("vkCreateDescriptorSetLayout"))?;
        let push_ranges = [vk::PushConstantRange::default()
            .stage_flags(vk::ShaderStageFlags::COMPUTE)
            .offset(0)
            .size(self.reflection.push_constant_size)];
        let set_layouts = [self.set_layout];
        let mut layout_info = vk::PipelineLayoutCreateInfo::default().set_layouts(&set_layouts);
        if self.reflection.push_constant_size > 0 {
            layout_info = layout_info.push_constant_ranges(&push_ranges);
        }
        self.layout = unsafe { device.raw.create_pipeline_layout(&layout_info, None) }
            .map_err(vk_err("vkCreatePipelineLayout"))?;
        Ok(())
    }

    /// The compute pipeline of the module with these specialization constants.
    fn create_compute(&mut self, specialization: &[(u32, u32)]) -> Result<()> {
        let device = &self.device;
        let (entries, data) = specialization_map(specialization);
        let spec_info = vk::SpecializationInfo::default().map_entries(&entries).data(&data);
        let stage = vk::PipelineShaderStageCreateInfo::default()
            .stage(vk::ShaderStageFlags::COMPUTE)
            .module(self.module)
            .name(c"main")
            .specialization_info(&spec_info);
        // Where the driver reports them, keep the compiled code's statistics
        // (register counts: bench/ prints them beside every kernel's time).
        let flags = if device.info.pipeline_statistics {
            vk::PipelineCreateFlags::CAPTURE_STATISTICS_KHR
        } else {
            vk::PipelineCreateFlags::empty()
        };
        let info = [vk::ComputePipelineCreateInfo::default().flags(flags).stage(stage).layout(self.layout)];
        let created = unsafe { device.raw.create_compute_pipelines(vk::PipelineCache::null(), &info, None) };
        self.raw = match created {
            Ok(p) => p[0],
            Err((_, e)) => {
                return Err(Error::Shader(format!("shader '{}': vkCreateComputePipelines failed: {e:?}", self.name)))
            }
        };
        Ok(())
    }
}

/// The module with the device's f32 denormal mode (`float_controls.rs`)
/// added, or `None` where the shader runs as it is.
fn with_denormal_mode(device: &Device, name: &str, spirv: &[u32]) -> Result<Option<Vec<u32>>> {
    match device.info.denormals {
        Denormals::NotGuaranteed | Denormals::FlushEmulated => Ok(None),
        mode => {
            let flush = mode == Denormals::Flushed;
            let widths = float_controls::widths(&device.info.float_controls, flush).unwrap_or_default();
            float_controls::with_denorm_mode(spirv, flush, &widths)
                .map(Some)
                .map_err(|e| Error::Shader(format!("shader '{name}': {e}")))
        }
    }
}

/// The specialization map entries and data of (constant_id, u32) pairs.
fn specialization_map(specialization: &[(u32, u32)]) -> (Vec<vk::SpecializationMapEntry>, Vec<u8>) {
    let entries = specialization
        .iter()
        .enumerate()
        .map(|(i, &(id, _))| vk::SpecializationMapEntry { constant_id: id, offset: (i * 4) as u32, size: 4 })
        .collect();
    let data = specialization.iter().flat_map(|&(_, v)| v.to_le_bytes()).collect();
    (entries, data)
}

impl Pipeline {
    /// The driver's statistics of the compiled pipeline (VK_KHR_pipeline_executable_properties),
    /// as (executable, statistic, value) rows; empty where the device does not report them.
    pub fn statistics(&self) -> Result<Vec<(String, String, String)>> {
        if !self.device.info.pipeline_statistics {
            return Ok(Vec::new());
        }
        let loader = ash::khr::pipeline_executable_properties::Device::new(&self.device.instance.raw, &self.device.raw);
        let info = vk::PipelineInfoKHR::default().pipeline(self.raw);
        let executables = unsafe { loader.get_pipeline_executable_properties(&info) }
            .map_err(vk_err("vkGetPipelineExecutablePropertiesKHR"))?;
        let mut rows = Vec::new();
        for (index, exe) in executables.iter().enumerate() {
            let exe_name = exe.name_as_c_str().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default();
            let query = vk::PipelineExecutableInfoKHR::default().pipeline(self.raw).executable_index(index as u32);
            let stats = unsafe { loader.get_pipeline_executable_statistics(&query) }
                .map_err(vk_err("vkGetPipelineExecutableStatisticsKHR"))?;
            for st in &stats {
                let name = st.name_as_c_str().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default();
                // SAFETY: the union member read is the one `format` names.
                let value = unsafe {
                    match st.format {
                        vk::PipelineExecutableStatisticFormatKHR::BOOL32 => (st.value.b32 == vk::TRUE).to_string(),
                        vk::PipelineExecutableStatisticFormatKHR::INT64 => st.value.i64.to_string(),
                        vk::PipelineExecutableStatisticFormatKHR::UINT64 => st.value.u64.to_string(),
                        vk::PipelineExecutableStatisticFormatKHR::FLOAT64 => st.value.f64.to_string(),
                        _ => "?".to_string(),
                    }
                };
                rows.push((exe_name.clone(), name, value));
            }
        }
        Ok(rows)
    }
}

impl Drop for Pipeline {
    fn drop(&mut self) {
        if self.device.leaking() {
            return; // lost or hung device: the GPU may still run it (leaked)
        }
        let d = &self.device.raw;
        unsafe { d.destroy_pipeline(self.raw, None) };
        unsafe { d.destroy_pipeline_layout(self.layout, None) };
        unsafe { d.destroy_descriptor_set_layout(self.set_layout, None) };
        unsafe { d.destroy_shader_module(self.module, None) };
    }
}

/// A pipeline together with the buffers bound to its bindings. Holding the
/// buffers here is what keeps them alive while a submission uses them; so are
/// `referenced` buffers, which the shader reaches by device address.
pub struct BindGroup {
    pub pipeline: Arc<Pipeline>,
    pub buffers: Vec<Arc<Buffer>>,
    pub referenced: Vec<Arc<Buffer>>,
    pool: vk::DescriptorPool,
    pub set: vk::DescriptorSet,
}

impl BindGroup {
    pub fn new(pipeline: &Arc<Pipeline>, buffers: Vec<Arc<Buffer>>, referenced: Vec<Arc<Buffer>>) -> Result<Arc<BindGroup>> {
        let device = &pipeline.device;
        device.check_alive()?;
        for (buf, what) in buffers.iter().map(|b| (b, "buffer")).chain(referenced.iter().map(|b| (b, "referenced buffer"))) {
            device.check_same(&buf.device, &format!("{what} '{}' bound to shader '{}'", buf.name, pipeline.name))?;
        }
        let wanted = &pipeline.reflection.bindings;
        if buffers.len() != wanted.len() {
            return Err(Error::Usage(format!(
                "shader '{}' has {} buffer bindings {:?}, got {} buffers",
                pipeline.name,
                wanted.len(),
                wanted,
                buffers.len()
            )));
        }
        let range = device.info.max_storage_buffer_range as u64;
        for (b, buf) in wanted.iter().zip(&buffers) {
            if buf.size > range {
                return Err(Error::Usage(format!(
                    "buffer '{}' ({} bytes) bound to binding {b} of shader '{}' exceeds this device's \
                     maxStorageBufferRange of {range} bytes; use a smaller batch or table",
                    buf.name, buf.size, pipeline.name
                )));
            }
        }
        let sizes = [vk::DescriptorPoolSize { ty: vk::DescriptorType::STORAGE_BUFFER, descriptor_count: wanted.len().max(1) as u32 }];
        let pool_info = vk::DescriptorPoolCreateInfo::default().max_sets(1).pool_sizes(&sizes);
        let pool = unsafe { device.raw.create_descriptor_pool(&pool_info, None) }
            .map_err(vk_err("vkCreateDescriptorPool"))?;
        let layouts = [pipeline.set_layout];
        let alloc_info = vk::DescriptorSetAllocateInfo::default().descriptor_pool(pool).set_layouts(&layouts);
        let set = match unsafe { device.raw.allocate_descriptor_sets(&alloc_info) } {
            Ok(s) => s[0],
            Err(e) => {
                unsafe { device.raw.destroy_descriptor_pool(pool, None) };
                return Err(vk_err("vkAllocateDescriptorSets")(e));
            }
        };
        let infos: Vec<[vk::DescriptorBufferInfo; 1]> = buffers
            .iter()
            .map(|b| [vk::DescriptorBufferInfo { buffer: b.raw, offset: 0, range: vk::WHOLE_SIZE }])
            .collect();
        let writes: Vec<vk::WriteDescriptorSet> = wanted
            .iter()
            .zip(&infos)
            .map(|(&b, info)| {
                vk::WriteDescriptorSet::default()
                    .dst_set(set)
                    .dst_binding(b)
                    .descriptor_type(vk::DescriptorType::STORAGE_BUFFER)
                    .buffer_info(info)
            })
            .collect();
        unsafe { device.raw.update_descriptor_sets(&writes, &[]) };
        Ok(Arc::new(BindGroup { pipeline: pipeline.clone(), buffers, referenced, pool, set }))
    }
}

impl Drop for BindGroup {
    fn drop(&mut self) {
        if self.pipeline.device.leaking() {
            return; // lost or hung device: the GPU may still read the set (leaked)
        }
        unsafe { self.pipeline.device.raw.destroy_descriptor_pool(self.pool, None) };
    }
}

//! The Vulkan instance: the loader, the validation layer (with
//! synchronization validation) and its messages. An `Instance` lists the
//! physical devices (`adapter.rs`) and is the parent of a `Device`.

use std::ffi::{c_void, CStr};
use std::sync::{Arc, Mutex};

use ash::vk;

use crate::error::{vk_err, Error, Result};

const VALIDATION_LAYER: &CStr = c"VK_LAYER_KHRONOS_validation";

/// Every validation message of every context that echoes them (all but a
/// test's deliberate misuse), so a test run can fail on any of them, even
/// from a context it never saw.
static ALL_MESSAGES: Mutex<Vec<String>> = Mutex::new(Vec::new());

pub fn all_validation_messages() -> Vec<String> {
    ALL_MESSAGES.lock().map(|l| l.clone()).unwrap_or_default()
}

/// Vulkan messages reported by the validation layer (warnings and errors).
#[derive(Default)]
pub struct Messages {
    pub list: Mutex<Vec<String>>,
    /// Print each message to stderr as it arrives (off only for a test that
    /// provokes one on purpose).
    pub echo: bool,
}

unsafe extern "system" fn debug_callback(
    severity: vk::DebugUtilsMessageSeverityFlagsEXT,
    _types: vk::DebugUtilsMessageTypeFlagsEXT,
    data: *const vk::DebugUtilsMessengerCallbackDataEXT<'_>,
    user: *mut c_void,
) -> vk::Bool32 {
    // SAFETY: `user` is the `Messages` the `Device` keeps alive until after the
    // messenger is destroyed; `data` is valid for the duration of the call.
    let messages = unsafe { &*(user as *const Messages) };
    let text = unsafe { data.as_ref() }
        .and_then(|d| (!d.p_message.is_null()).then(|| unsafe { CStr::from_ptr(d.p_message) }))
        .map(|m| m.to_string_lossy().into_owned())
        .unwrap_or_default();
    let line = format!("vulkan validation [{severity:?}]: {text}");
    if messages.echo {
        eprintln!("{line}");
        if let Ok(mut all) = ALL_MESSAGES.lock() {
            all.push(line.clone());
        }
    }
    if let Ok(mut list) = messages.list.lock() {
        list.push(line);
    }
    vk::FALSE
}

/// Synchronization validation across submissions (a chunk's writes read by
/// the next chunk, an upload read by a dispatch) is a separate check of the
/// layer with no `VkValidationFeatureEnableEXT` value in 1.3.239: only the
/// layer's settings turn it on, read from `VK_LAYER_ENABLES` when the instance
/// is created. It is set once, before the first validated instance, unless
/// the user set the variable (then theirs applies).
fn enable_queue_submit_sync_validation() {
    static ONCE: std::sync::Once = std::sync::Once::new();
    ONCE.call_once(|| {
        if std::env::var_os("VK_LAYER_ENABLES").is_none() {
            // ':' separates the layer's list entries on Linux.
            std::env::set_var(
                "VK_LAYER_ENABLES",
                "VK_VALIDATION_FEATURE_ENABLE_SYNCHRONIZATION_VALIDATION_EXT:\
                 VALIDATION_CHECK_ENABLE_SYNCHRONIZATION_VALIDATION_QUEUE_SUBMIT",
            );
        }
    });
}

/// A Vulkan instance with its debug messenger, used both to list devices and
/// as the parent of a `Device`.
pub struct Instance {
    pub entry: ash::Entry,
    pub raw: ash::Instance,
    debug: Option<(ash::ext::debug_utils::Instance, vk::DebugUtilsMessengerEXT)>,
    pub messages: Arc<Messages>,
}

impl Instance {
    pub fn new(validation: bool) -> Result<Self> {
        Self::with_echo(validation, true)
    }

    /// `echo`: print validation messages to stderr as they arrive.
    pub fn with_echo(validation: bool, echo: bool) -> Result<Self> {
        // SAFETY: loading the system Vulkan loader; its entry points are used
        // only through ash's typed wrappers.
        let entry = unsafe { ash::Entry::load() }
            .map_err(|e| Error::Loader(format!("{e} (Debian: apt-get install libvulkan1 mesa-vulkan-drivers)")))?;
        let app_name = c"divgpu";
        let app = vk::ApplicationInfo::default()
            .application_name(app_name)
            .engine_name(app_name)
            .api_version(vk::API_VERSION_1_2);
        let (layers, extensions) = if validation { validation_layer(&entry)? } else { (Vec::new(), Vec::new()) };
        let enables = [vk::ValidationFeatureEnableEXT::SYNCHRONIZATION_VALIDATION];
        let mut features = vk::ValidationFeaturesEXT::default().enabled_validation_features(&enables);
        let mut create_info = vk::InstanceCreateInfo::default()
            .application_info(&app)
            .enabled_layer_names(&layers)
            .enabled_extension_names(&extensions);
        if validation {
            create_info = create_info.push_next(&mut features);
        }
        let raw = unsafe { entry.create_instance(&create_info, None) }.map_err(vk_err("vkCreateInstance"))?;
        let messages = Arc::new(Messages { list: Mutex::new(Vec::new()), echo });
        let mut instance = Instance { entry, raw, debug: None, messages };
        if validation {
            instance.debug = Some(instance.messenger()?);
        }
        Ok(instance)
    }

    /// The debug messenger that hands the layer's warnings and errors to
    /// `debug_callback`, with this instance's `Messages` as its user data.
    fn messenger(&self) -> Result<(ash::ext::debug_utils::Instance, vk::DebugUtilsMessengerEXT)> {
        let loader = ash::ext::debug_utils::Instance::new(&self.entry, &self.raw);
        let info = vk::DebugUtilsMessengerCreateInfoEXT::default()
            .message_severity(vk::DebugUtilsMessageSeverityFlagsEXT::WARNING | vk::DebugUtilsMessageSeverityFlagsEXT::ERROR)
            .message_type(
                vk::DebugUtilsMessageTypeFlagsEXT::GENERAL
                    | vk::DebugUtilsMessageTypeFlagsEXT::VALIDATION
                    | vk::DebugUtilsMessageTypeFlagsEXT::PERFORMANCE,
            )
            .pfn_user_callback(Some(debug_callback))
            .user_data(Arc::as_ptr(&self.messages) as *mut c_void);
        let messenger = unsafe { loader.create_debug_utils_messenger(&info, None) }
            .map_err(vk_err("vkCreateDebugUtilsMessengerEXT"))?;
        Ok((loader, messenger))
    }

    pub fn physical_devices(&self) -> Result<Vec<vk::PhysicalDevice>> {
        unsafe { self.raw.enumerate_physical_devices() }.map_err(vk_err("vkEnumeratePhysicalDevices"))
    }
}

type Names = Vec<*const std::ffi::c_char>;

/// The validation layer and the instance extensions it needs (debug utils,
/// validation features), or an error saying what is not installed.
fn validation_layer(entry: &ash::Entry) -> Result<(Names, Names)> {
    let available =
        unsafe { entry.enumerate_instance_layer_properties() }.map_err(vk_err("vkEnumerateInstanceLayerProperties"))?;
    let found = available.iter().any(|l| l.layer_name_as_c_str().map(|n| n == VALIDATION_LAYER).unwrap_or(false));
    if !found {
        return Err(Error::Device(
            "validation was requested but VK_LAYER_KHRONOS_validation is not installed \
             (Debian: apt-get install vulkan-validationlayers)"
                .into(),
        ));
    }
    // Synchronization validation (hazards between commands and submissions)
    // is off by default in the layer; the layer of Debian 12 (1.3.239)
    // predates VK_EXT_layer_settings, so it is asked for through
    // VK_EXT_validation_features.
    let layer_extensions = unsafe { entry.enumerate_instance_extension_properties(Some(VALIDATION_LAYER)) }
        .map_err(vk_err("vkEnumerateInstanceExtensionProperties"))?;
    let has_features = layer_extensions
        .iter()
        .any(|e| e.extension_name_as_c_str().map(|n| n == ash::ext::validation_features::NAME).unwrap_or(false));
    if !has_features {
        return Err(Error::Device(
            "the validation layer lacks VK_EXT_validation_features, needed for synchronization validation".into(),
        ));
    }
    enable_queue_submit_sync_validation();
    Ok((
        vec![VALIDATION_LAYER.as_ptr()],
        vec![ash::ext::debug_utils::NAME.as_ptr(), ash::ext::validation_features::NAME.as_ptr()],
    ))
}

impl Drop for Instance {
    fn drop(&mut self) {
        if let Some((loader, messenger)) = self.debug.take() {
            unsafe { loader.destroy_debug_utils_messenger(messenger, None) };
        }
        unsafe { self.raw.destroy_instance(None) };
    }
}

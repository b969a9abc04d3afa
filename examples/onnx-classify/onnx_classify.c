/* SPDX-License-Identifier: Apache-2.0 */
/* onnx_classify.c - classify one Fashion-MNIST image with an ONNX model.
 *
 * Imports the model with floe_onnx.h, reads the image (a test image of the IDX files, or a
 * .npy of 784 f32 pixels in [0, 1]), runs the model once and prints the five most likely
 * classes with their softmax probabilities.
 *
 *   cc onnx_classify.c -o onnx_classify $(pkg-config --cflags --libs floe-onnx)
 *   ./onnx_classify model.onnx --index 0        # test image 0 of Fashion-MNIST
 *   ./onnx_classify model.onnx image.npy
 *
 * The model must take one f32 input of 784 elements per image ([N,784] or [N,1,28,28]; the
 * batch dim is set to 1) and give the 10 class scores (logits) as its first output.
 */
#include <floe/floe_onnx.h> /* includes floe.h */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

enum { NUM_CLASSES = 10, IMAGE_PIXELS = 28 * 28, TOP = 5 };

static const char *const class_names[NUM_CLASSES] = {
    "T-shirt/top", "Trouser", "Pullover", "Dress", "Coat",
    "Sandal",      "Shirt",   "Sneaker",  "Bag",   "Ankle boot"};

/* Test image `index` of Fashion-MNIST in dir (NULL: Debian's dataset package) as f32 [784],
 * pixels / 255 as the models were trained on; *label gets its class. Caller releases. NULL
 * with st set on error. */
static FloeTensor *load_test_image(const char *dir, long index, int *label, FloeStatus *st) {
  FloeDataset *d = floe_fashion_mnist_load(dir, 0, st);
  if (!d) return NULL;
  FloeTensor *t = NULL;
  if (index < 0 || index >= floe_dataset_size(d)) {
    floe_status_set(st, FLOE_OUT_OF_RANGE, "--index %ld: the test set has images 0 to %lld",
                    index, (long long)floe_dataset_size(d) - 1);
  } else if ((t = floe_tensor_new(FLOE_F32, 1, (int64_t[]){IMAGE_PIXELS}, st))) {
    const uint8_t *px = floe_dataset_pixels(d) + index * IMAGE_PIXELS;
    float *x = floe_tensor_data(t);
    for (int i = 0; i < IMAGE_PIXELS; i++) x[i] = (float)px[i] / 255.0f;
    *label = floe_dataset_labels(d)[index];
  }
  floe_dataset_free(d);
  return t;
}

/* A .npy of 784 f32 pixels (any shape). Caller releases; NULL with st set on error. */
static FloeTensor *load_npy_image(const char *path, FloeStatus *st) {
  FloeTensor *t = floe_tensor_load_npy(path, st); /* errors name the file and byte offset */
  if (t && (floe_tensor_dtype(t) != FLOE_F32 || floe_tensor_num_elements(t) != IMAGE_PIXELS)) {
    floe_status_set(st, FLOE_INVALID_ARGUMENT, "%s: want %d f32 pixels, found %lld %s", path,
                    IMAGE_PIXELS, (long long)floe_tensor_num_elements(t),
                    floe_dtype_name(floe_tensor_dtype(t)));
    floe_tensor_release(t);
    return NULL;
  }
  return t;
}

/* image reshaped to the model's input shape with the batch (every unknown dim) 1: a view
 * sharing its pixels. Caller releases; NULL with st set when the shapes do not agree. */
static FloeTensor *as_model_input(const FloeOnnxModel *m, FloeTensor *image, FloeStatus *st) {
  FloeShape s = floe_onnx_model_input_shape(m, 0);
  int64_t dims[FLOE_MAX_DIMS], n = 1;
  for (int i = 0; i < s.rank; i++) n *= dims[i] = s.dims[i] < 0 ? 1 : s.dims[i];
  if (floe_onnx_model_input_dtype(m, 0) != FLOE_F32 || s.rank < 1 || n != IMAGE_PIXELS) {
    char buf[64];
    floe_status_set(st, FLOE_INVALID_ARGUMENT, "the model's input '%s' is %s %s, not one image of "
                    "%d f32 pixels", floe_onnx_model_input_name(m, 0),
                    floe_dtype_name(floe_onnx_model_input_dtype(m, 0)),
                    floe_shape_str(&s, buf, sizeof buf), IMAGE_PIXELS);
    return NULL;
  }
  return floe_tensor_reshape(image, s.rank, dims, st);
}

/* Runs the model on input; the caller releases the returned scores. NULL with st set. */
static FloeTensor *run_model(FloeOnnxModel *m, FloeTensor *input, FloeStatus *st) {
  /* The session snapshots the imported graph; it runs on the default runtime, whose plugins
   * come from FLOE_PLUGIN_PATH and the installed plugin folder. */
  FloeSession *s = floe_session_new(floe_onnx_model_graph(m), NULL, st);
  if (!s) return NULL;
  /* Feed the placeholder the import made for ONNX input 0; fetch what computes output 0. */
  FloeFeed feed = {floe_onnx_model_input_node(m, 0), input};
  const char *fetch = floe_onnx_model_output_fetch(m, 0);
  FloeTensor *out = NULL;
  floe_session_run(s, &feed, 1, &fetch, 1, NULL, 0, &out, st); /* out stays NULL on error */
  floe_session_free(s); /* out lives on: it is host memory of the default runtime */
  return out;
}

int main(int argc, char **argv) {
  const char *model_path = NULL, *npy = NULL, *data = NULL;
  long index = 0;
  for (int i = 1; i < argc; i++) {
    if (!strcmp(argv[i], "--index") && i + 1 < argc) index = strtol(argv[++i], NULL, 10);
    else if (!strcmp(argv[i], "--data") && i + 1 < argc) data = argv[++i];
    else if (argv[i][0] != '-' && !model_path) model_path = argv[i];
    else if (argv[i][0] != '-' && !npy) npy = argv[i];
    else model_path = NULL, i = argc; /* anything else: usage */
  }
  if (!model_path) {
    fprintf(stderr, "usage: onnx_classify MODEL.onnx [IMAGE.npy | --index N] [--data DIR]\n");
    return 2;
  }

  int rc = 1, label = -1;
  FloeOnnxModel *m = NULL;
  FloeTensor *image = NULL, *input = NULL, *logits = NULL;
  FloeStatus *st = floe_status_new();
  if (!st) {
    fprintf(stderr, "onnx_classify: out of memory\n");
    return 1;
  }
  /* Import: ONNX inputs become placeholders, initializers constants, nodes Floe ops. */
  if (!(m = floe_onnx_import_file(model_path, NULL, st))) goto fail;
  if (floe_onnx_model_num_inputs(m) != 1 || floe_onnx_model_num_outputs(m) < 1) {
    floe_status_set(st, FLOE_INVALID_ARGUMENT, "%s: want one input and an output, found %d and %d",
                    model_path, floe_onnx_model_num_inputs(m), floe_onnx_model_num_outputs(m));
    goto fail;
  }
  image = npy ? load_npy_image(npy, st) : load_test_image(data, index, &label, st);
  if (!image || !(input = as_model_input(m, image, st))) goto fail;
  if (!(logits = run_model(m, input, st))) goto fail;
  if (floe_tensor_dtype(logits) != FLOE_F32 || floe_tensor_num_elements(logits) != NUM_CLASSES) {
    floe_status_set(st, FLOE_INVALID_ARGUMENT, "output '%s' has %lld %s values, not %d f32 scores",
                    floe_onnx_model_output_name(m, 0), (long long)floe_tensor_num_elements(logits),
                    floe_dtype_name(floe_tensor_dtype(logits)), NUM_CLASSES);
    goto fail;
  }

  /* Softmax, shifted by the largest score so exp never overflows. */
  const float *z = floe_tensor_data(logits);
  double p[NUM_CLASSES], zmax = z[0], sum = 0;
  for (int c = 1; c < NUM_CLASSES; c++) zmax = z[c] > zmax ? z[c] : zmax;
  for (int c = 0; c < NUM_CLASSES; c++) sum += p[c] = exp(z[c] - zmax);
  /* The TOP most likely classes, by selection (ties: the lower class first). */
  int order[NUM_CLASSES];
  for (int c = 0; c < NUM_CLASSES; c++) order[c] = c;
  for (int i = 0; i < TOP; i++)
    for (int j = i + 1; j < NUM_CLASSES; j++)
      if (p[order[j]] > p[order[i]]) {
        int t = order[i];
        order[i] = order[j];
        order[j] = t;
      }

  if (npy) printf("%s:\n", npy);
  else printf("test image %ld (label %d, %s):\n", index, label, class_names[label]);
  for (int i = 0; i < TOP; i++)
    printf("%d. class %d %-12s p = %.6f\n", i + 1, order[i], class_names[order[i]],
           p[order[i]] / sum);
  rc = 0;
  goto out;

fail:
  fprintf(stderr, "onnx_classify: %s\n", floe_status_message(st));
out:
  floe_tensor_release(logits);
  floe_tensor_release(input);
  floe_tensor_release(image);
  floe_onnx_model_free(m);
  floe_status_free(st);
  return rc;
}

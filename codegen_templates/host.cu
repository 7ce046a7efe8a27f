host.cu - the host statements of one call of a graph (the body of
GRAPH_run in api.cu).  Every statement names the .sg line (${line}) it
comes from, so a failing CUDA, cuBLAS or NCCL call reports it; ${s} is a
stream index (0: `default`, the caller's stream); `rt` is the model's
SgrtModel, `M` the generated model, `io` the call's tensors and `ext` its
extern events.
//@ comment

	/* ${where}: ${text} */
${?mark}${mark}
//@ decl
	${type} *${var} = ${init};
//@ decl_empty
	[[maybe_unused]] ${type} *${var} = ${init}; /* its readers may all be skipped */
//@ alloc
	SGRT_TRY(sgrt_alloc_async(rt, (void **)&${var}, ${bytes}, ${s}, ${line}));
//@ arena
	${var} = (${type} *)SGRT_AT(rt, ${off}); /* ${bytes} bytes of the arena */
//@ hostbuf
	${var} = (${type} *)M->host[${k}];
//@ alias
	${var} = ${from};
//@ free
	SGRT_TRY(sgrt_free_async(rt, ${var}, ${s}, ${line}));
//@ free_record
	SGRT_CHECK_CUDA(rt, cudaEventRecord(M->fev[${k}], sgrt_stream(rt, ${s})), ${line});
//@ free_wait
	SGRT_CHECK_CUDA(rt, cudaStreamWaitEvent(sgrt_stream(rt, ${s}), M->fev[${k}], 0), ${line});
//@ launch
	SGRT_KERNEL(rt, ${s}, "${kname}", ${line},
	            ${kname}<<<${grid}, ${block}, ${smem}, sgrt_stream(rt, ${s})>>>(${args}));
//@ launch_if_aligned
	if (${cond})
		SGRT_KERNEL(rt, ${s}, "${kname}", ${line},
		            ${kname}<<<${grid}, ${block}, 0, sgrt_stream(rt, ${s})>>>(${args}));
	else
		SGRT_KERNEL(rt, ${s}, "${kname2}", ${line},
		            ${kname2}<<<${grid2}, ${block}, 0, sgrt_stream(rt, ${s})>>>(${args}));
//@ flash
	{
		/* flash attention (sgk_attention.cuh): q, k, v as [nb0, nb1, rows, dim]. */
		SgFlashParams fp;
		sg_flash_params_init(&fp, ${nb0}, ${nb1}, ${l}, ${slen}, ${e}, ${ev}, ${scale}, ${causal});
		fp.q = ${q};
		fp.k = ${k};
		fp.v = ${v};
		fp.o = ${o};
		fp.lse = ${lse};
${strides}
${?bwd}		fp.dout = ${g};
${?bwd}		fp.dq = ${dq};
${?bwd}		fp.dk = ${dk};
${?bwd}		fp.dv = ${dv};
${?bwd}		fp.delta = ${delta};
${?drop}		/* dropout_p: the weights' dropout (salt ${salt}), drawn from opt.rng */
${?drop}		fp.rng = (const sgk_i64 *)io[${slot}];
${?drop}		fp.salt = ${salt};
${?drop}		fp.drop_thresh = ${thresh};
${?drop}		fp.drop_scale = ${dscale};
${?dmask}		fp.dmask = ${dmask}; /* the keep bits, the forward's for the backward */
${?cudnn}		/* cuDNN's fused attention first; the kernels when it declines. */
${?cudnn}		SgrtSdpa sd;
${?cudnn}		SGRT_SDPA_FROM_FLASH(&sd, &fp, ${sdt});
${?fwd_cd}		SGRT_SDPA_OR(rt, ${s}, &sd, 0, "${kname}[cudnn]", ${line},
${?fwd_cd}		             SGRT_KERNEL(rt, ${s}, "${kname}[sgk]", ${line},
${?fwd_cd}		                         SGRT_CHECK_CUDA(rt, sg_launch_flash_fwd<${t}>(&fp, sgrt_stream(rt, ${s})), ${line})));
${?fwd_sgk}		SGRT_KERNEL(rt, ${s}, "${kname}", ${line},
${?fwd_sgk}		            SGRT_CHECK_CUDA(rt, sg_launch_flash_fwd<${t}>(&fp, sgrt_stream(rt, ${s})), ${line}));
${?bwd_cd}		SGRT_SDPA_OR(rt, ${s}, &sd, 1, "${kname_bwd}[cudnn]", ${line},
${?bwd_cd}		             SGRT_KERNEL(rt, ${s}, "${kname_bwd}[sgk]", ${line},
${?bwd_cd}		                         SGRT_CHECK_CUDA(rt, sg_launch_flash_bwd<${t}>(&fp, sgrt_stream(rt, ${s})), ${line})));
${?bwd_sgk}		SGRT_KERNEL(rt, ${s}, "${kname_bwd}", ${line},
${?bwd_sgk}		            SGRT_CHECK_CUDA(rt, sg_launch_flash_bwd<${t}>(&fp, sgrt_stream(rt, ${s})), ${line}));
	}
//@ conv_cudnn
	{
		const SgConvGeom geom = ${geom};
		SGRT_CONV_OR(rt, ${s}, ${dir}, ${dt}, &geom.n, ${a}, ${b}, ${bias}, ${out},
		             "${kname}[cudnn]", ${line},
		             SGRT_KERNEL(rt, ${s}, "${kname}[direct]", ${line},
		                         SGRT_CHECK_CUDA(rt, ${call}, ${line})));
	}
//@ lib_call
	SGRT_KERNEL(rt, ${s}, "${kname}", ${line},
	            SGRT_CHECK_CUDA(rt, ${call}, ${line}));
//@ smem_attr
	SGRT_CHECK_CUDA(rt, cudaFuncSetAttribute(${kname}, cudaFuncAttributeMaxDynamicSharedMemorySize, ${smem}), ${line});
//@ copy
	SGRT_TRY(sgrt_copy(rt, ${s}, ${dst}, ${src}, ${bytes}, "${name}", ${line}));
//@ memset
	SGRT_TRY(sgrt_memset(rt, ${s}, ${dst}, 0, ${bytes}, "${name}", ${line}));
//@ record
	SGRT_TRY(sgrt_record(rt, ${e}, ${s}, ${line}));
//@ wait
	SGRT_TRY(sgrt_wait(rt, ${e}, ${s}, ${line}));
//@ record_ext
	SGRT_TRY(sgrt_cg_record_ext(rt, ext[${e}], ${s}, ${line}));
//@ wait_ext
	SGRT_TRY(sgrt_cg_wait_ext(rt, ext[${e}], ${s}, ${line}));
//@ wait_stream
	SGRT_TRY(sgrt_wait_stream(rt, ${s}, ${other}, ${line}));
//@ synchronize
	SGRT_TRY(sgrt_synchronize(rt, ${line}));
//@ barrier
	SGRT_TRY(sgrt_cg_barrier(rt, ${line}));
//@ rng_advance
	/* The random ops' generator offset (opt.rng[1]) advances once a call,
	 * on `default` before anything else: every draw below reads the new one. */
	SGRT_KERNEL(rt, 0, "rng_advance", ${line},
	            SGRT_CHECK_CUDA(rt, sg_launch_rng_advance((sgk_i64 *)io[${slot}], sgrt_stream(rt, 0)), ${line}));
//@ fork
	/* Inputs, params and consts are ready on `default`: the other streams start after it. */
	SGRT_TRY(sgrt_cg_fork(rt, ${line}));
//@ join
	/* Every stream joins `default` before the call ends. */
	SGRT_TRY(sgrt_join_all(rt, ${line}));
//@ gemm
	{
		SgrtGemm g;
		memset(&g, 0, sizeof g);
		g.dtype = ${dtype};
${?trans_a}		g.trans_a = ${trans_a};
		g.trans_b = ${trans_b};
		g.m = ${m};
		g.n = ${n};
		g.k = ${k};
${?lda}		g.lda = ${lda};
${?ldb}		g.ldb = ${ldb};
${?batch}		g.batch = ${batch};
${?batch}		g.stride_a = ${stride_a};
${?batch}		g.stride_b = ${stride_b};
${?bias}		g.bias = ${bias};
${?epilogue}		g.epilogue = ${epilogue};
${?aux}		g.aux = ${aux};
${?alpha}		g.alpha = ${alpha};
${?alpha}		g.beta = 1;
${?c_in}		g.c_in = ${c_in};
${?c_in}		g.alpha = 1;
${?c_in}		g.beta = 1;
		SGRT_TRY(sgrt_gemm(rt, ${s}, &g, ${a}, ${b}, ${c}, "${kname}", ${line}));
	}
//@ all_reduce
	SGRT_TRY(sgrt_all_reduce(rt, ${s}, ${send}, ${recv}, ${count}, ${dtype}, ${op}, "${name}", ${line}));
//@ all_reduce_algo
	SGRT_TRY(sgrt_all_reduce_algo(rt, ${s}, ${send}, ${recv}, ${count}, ${dtype}, ${op}, ${algo}, "${name}", ${line}));
//@ all_gather_algo
	SGRT_TRY(sgrt_all_gather_algo(rt, ${s}, ${send}, ${recv}, ${count}, ${dtype}, ${algo}, "${name}", ${line}));
//@ broadcast
	SGRT_TRY(sgrt_broadcast(rt, ${s}, ${send}, ${recv}, ${count}, ${dtype}, ${root}, "${name}", ${line}));
//@ all_gather
	SGRT_TRY(sgrt_all_gather(rt, ${s}, ${send}, ${recv}, ${count}, ${dtype}, "${name}", ${line}));
//@ reduce_scatter
	SGRT_TRY(sgrt_reduce_scatter(rt, ${s}, ${send}, ${recv}, ${count}, ${dtype}, ${op}, "${name}", ${line}));
//@ all_to_all
	SGRT_TRY(sgrt_all_to_all(rt, ${s}, ${send}, ${recv}, ${count}, ${dtype}, "${name}", ${line}));
